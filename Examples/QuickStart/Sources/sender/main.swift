import Wormhole

struct Note: Codable, Sendable { var text: String }

// Passes one note, made of the arguments, under `identifier`; prints what went wrong
// instead. The arguments are the note's text, never an identifier: `sender ../notes`
// passes the note "../notes" under "note".
func send(_ text: String, as identifier: String, through wormhole: Wormhole) {
    do {
        let sequence = try wormhole.passMessage(Note(text: text), identifier: identifier)
        print("passed note \(sequence) under '\(identifier)'")
    } catch where error.code == .invalidIdentifier {
        print("not passed:", error)   // were the identifier "../notes": identifier '../notes' may not contain '/'
    } catch {
        print("not passed:", error)   // a full disk, an unsafe container, ...
    }
}

let wormhole = try Wormhole(applicationGroupIdentifier: "group.com.example.notes")
let words = CommandLine.arguments.dropFirst()
send(words.isEmpty ? "hello" : words.joined(separator: " "), as: "note", through: wormhole)
