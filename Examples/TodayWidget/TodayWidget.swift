import ArgumentParser

/// An app and its Today widget, as two processes: the story Wormhole was made for.
@main
struct TodayWidget: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "today-widget",
        abstract: "A containing app and its widget, talking through a wormhole.",
        discussion: """
            Start the app in one terminal and the widget in another, in either order; \
            kill and restart the widget at any time. The widget shows the latest count at \
            once, follows it live, and its button (Enter) asks the app to reset the count.

            Examples (after swift build, from .build/debug):
              today-widget app
              today-widget widget
              today-widget widget --once
              today-widget widget --ask
            """,
        subcommands: [ContainingApp.self, Widget.self])
}
