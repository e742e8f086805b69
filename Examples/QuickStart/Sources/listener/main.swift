import Foundation
import Wormhole

struct Note: Codable, Sendable { var text: String }

// Into a pipe or a file, standard output is written in blocks of 4 KiB, so `print` may
// not show until much later: write each line at once instead.
setvbuf(stdout, nil, _IOLBF, 0)

// Every cooperating process names the same application group.
let wormhole = try Wormhole(applicationGroupIdentifier: "group.com.example.notes")
print("listening in \(wormhole.directory ?? "?"); run the sender in another terminal")

// The loop waits for each message, so the program stays alive until Ctrl-C. It starts
// with the latest note, when there is one, then prints every new one.
for try await note in wormhole.messages(withIdentifier: "note", as: Note.self, startingFrom: .latest) {
    print("note:", note.text)
}
