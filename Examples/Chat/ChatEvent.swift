import Foundation

/// What travels in the room: someone joined, said something, or left. Passed as JSON
/// under the room's identifier; the store adds the time and the sending process.
struct ChatEvent: Codable, Sendable {
    enum Kind: String, Codable, Sendable {
        case join, message, leave
    }

    var kind: Kind
    var name: String
    var text: String?

    static func join(_ name: String) -> ChatEvent { ChatEvent(kind: .join, name: name) }
    static func leave(_ name: String) -> ChatEvent { ChatEvent(kind: .leave, name: name) }
    static func message(_ name: String, _ text: String) -> ChatEvent { ChatEvent(kind: .message, name: name, text: text) }

    /// The line a participant sees: `[12:00:01] bob: hi` or `[12:00:01] * bob joined`.
    func line(at date: Date) -> String {
        let time = Self.clock(date)
        switch kind {
        case .join: return "[\(time)] * \(name) joined"
        case .leave: return "[\(time)] * \(name) left"
        case .message: return "[\(time)] \(name): \(text ?? "")"
        }
    }

    /// `HH:mm:ss` in local time.
    static func clock(_ date: Date) -> String {
        let parts = Calendar.current.dateComponents([.hour, .minute, .second], from: date)
        return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }
}
