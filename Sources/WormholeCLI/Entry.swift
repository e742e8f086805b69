/// The process's entry point: ``WormholeCommand/start()``.
@main
enum Entry {
    static func main() {
        WormholeCommand.start()
    }
}
