import Foundation
import Wormhole

struct Note: Codable, Sendable { var text: String }

// Into a pipe or a file, `print` fills a 4 KiB buffer before anything is written, so its
// lines may show much later (`listener | tee log` shows nothing for a while): write
// each line at once instead.
func say(_ line: String) {
    try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
}

// Every cooperating process names the same application group.
let wormhole = try Wormhole(applicationGroupIdentifier: "group.com.example.notes")
say("listening in \(wormhole.directory ?? "?"); run the sender in another terminal")

// The loop waits for each message, so the program stays alive until Ctrl-C. It starts
// with the latest note, when there is one, then prints every new one.
for try await note in wormhole.messages(withIdentifier: "note", as: Note.self, startingFrom: .latest) {
    say("note: \(note.text)")
}
