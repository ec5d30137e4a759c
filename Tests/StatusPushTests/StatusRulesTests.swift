import Foundation
import PushModels
import Testing

@testable import StatusPush

/// Every MUST of the registration rules and every preference, each failing case included.
@Suite struct StatusRulesTests {
    let client = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x11, count: 32))
    let server = try! Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x22, count: 32))
    let token = "b6ae4fde-bb65-11ea-b3de-0242ac130004"

    func registration(_ change: (inout StatusRegistration) throws -> Void = { _ in }) throws -> StatusRegistration {
        var r = StatusRegistration()
        r.tokenType = .apnToken
        r.deviceToken = "abcdef0123"
        r.installationID = "c6ae4fde-bb65-11ea-b3de-0242ac130004"
        r.accessToken = token
        r.enabled = true
        r.version = 1
        r.apnTopic = "im.status.ethereum"
        r.grant = Data(try StatusCrypto.makeGrant(client: client, server: try server.publicKey(), accessToken: token))
        try change(&r)
        return r
    }

    func check(_ r: StatusRegistration, stored: UInt64 = 0) throws -> StatusRegistrationRules.Verdict {
        StatusRegistrationRules.check(
            r, client: try client.publicKey(), server: try server.publicKey(), storedVersion: stored)
    }

    func refusal(_ verdict: StatusRegistrationRules.Verdict) -> StatusRegistrationResponse.ErrorType? {
        if case .refused(let error, _) = verdict { return error }
        return nil
    }

    @Test func aValidRegistrationIsAccepted() throws {
        let r = try registration()
        #expect(try check(r) == .register(r))
        // A Firebase token needs no topic.
        let firebase = try registration {
            $0.tokenType = .firebaseToken
            $0.apnTopic = ""
        }
        #expect(try check(firebase) == .register(firebase))
    }

    @Test func versionMustBeNonZeroAndAboveTheStoredOne() throws {
        // Zero is an empty version: malformed, as an empty token is.
        #expect(refusal(try check(try registration { $0.version = 0 })) == .malformedMessage)
        #expect(refusal(try check(try registration { $0.version = 3 }, stored: 3)) == .versionMismatch)
        #expect(refusal(try check(try registration { $0.version = 2 }, stored: 3)) == .versionMismatch)
        #expect(refusal(try check(try registration { $0.version = 4 }, stored: 3)) == nil)
        // An unregistration is versioned too; nothing else is asked of it.
        let unregister = try registration {
            $0.unregister = true
            $0.version = 5
            $0.deviceToken = ""
            $0.grant = Data()
        }
        #expect(try check(unregister, stored: 4) == .unregister(unregister))
        #expect(refusal(try check(unregister, stored: 5)) == .versionMismatch)
    }

    @Test func tokenTypeMustBeSupported() throws {
        #expect(refusal(try check(try registration { $0.tokenType = .unknownTokenType })) == .unsupportedTokenType)
        #expect(
            refusal(try check(try registration { $0.tokenType = .UNRECOGNIZED(7) })) == .unsupportedTokenType)
    }

    @Test func malformedFieldsAreRefused() throws {
        #expect(refusal(try check(try registration { $0.deviceToken = "" })) == .malformedMessage)
        #expect(refusal(try check(try registration { $0.installationID = "" })) == .malformedMessage)
        #expect(refusal(try check(try registration { $0.apnTopic = "" })) == .malformedMessage)
        // The access token must be a UUID (and the grant must be for that token).
        let notUUID = "not-a-uuid"
        let withBadToken = try registration {
            $0.accessToken = notUUID
            $0.grant = Data(
                try StatusCrypto.makeGrant(client: client, server: try server.publicKey(), accessToken: notUUID))
        }
        #expect(refusal(try check(withBadToken)) == .malformedMessage)
    }

    @Test func theGrantMustBeTheClientsSignatureForThisServer() throws {
        #expect(refusal(try check(try registration { $0.grant = Data() })) == .malformedMessage)
        let other = try Secp256k1.PrivateKey(bytes: [UInt8](repeating: 0x44, count: 32))
        // Signed by someone else.
        let byOther = try registration {
            $0.grant = Data(
                try StatusCrypto.makeGrant(client: other, server: try server.publicKey(), accessToken: token))
        }
        #expect(refusal(try check(byOther)) == .malformedMessage)
        // For another server.
        let forOther = try registration {
            $0.grant = Data(
                try StatusCrypto.makeGrant(client: client, server: try other.publicKey(), accessToken: token))
        }
        #expect(refusal(try check(forOther)) == .malformedMessage)
        // For another token.
        let otherToken = try registration { $0.accessToken = "d6ae4fde-bb65-11ea-b3de-0242ac130004" }
        #expect(refusal(try check(otherToken)) == .malformedMessage)
        // Not a signature at all.
        #expect(refusal(try check(try registration { $0.grant = Data([1, 2, 3]) })) == .malformedMessage)
    }

    func notification(_ type: StatusNotification.PushNotificationType, chat: String, author: String = "alice")
        -> StatusNotification
    {
        var n = StatusNotification()
        n.type = type
        n.chatID = Data(StatusCrypto.shake256(Array(chat.utf8)))
        n.author = Data(StatusCrypto.shake256(Array(author.utf8)))
        return n
    }

    func hash(_ text: String) -> Data { Data(StatusCrypto.shake256(Array(text.utf8))) }

    @Test func preferencesFilterAsSpecified() throws {
        let plain = try registration { $0.allowedMentionsChatList = [hash("general")] }
        #expect(StatusPreferences.filterReason(notification(.message, chat: "general"), for: plain) == nil)
        #expect(StatusPreferences.filterReason(notification(.mention, chat: "general"), for: plain) == nil)
        #expect(
            StatusPreferences.filterReason(notification(.requestToJoinCommunity, chat: "x"), for: plain) == nil)

        let disabled = try registration { $0.enabled = false }
        #expect(
            StatusPreferences.filterReason(notification(.message, chat: "general"), for: disabled)?.rawValue
                == "disabled")

        let blocked = try registration {
            $0.blockedChatList = [hash("spam"), hash("mallory")]
            $0.allowedMentionsChatList = [hash("spam"), hash("general")]
        }
        #expect(
            StatusPreferences.filterReason(notification(.message, chat: "spam"), for: blocked)?.rawValue
                == "blocked_chat")
        #expect(StatusPreferences.filterReason(notification(.message, chat: "general"), for: blocked) == nil)
        #expect(
            StatusPreferences.filterReason(notification(.message, chat: "general", author: "mallory"), for: blocked)?
                .rawValue
                == "blocked_author")
        #expect(
            StatusPreferences.filterReason(notification(.mention, chat: "general", author: "mallory"), for: blocked)?
                .rawValue
                == "blocked_author")

        let muted = try registration { $0.mutedChatList = [hash("noisy")] }
        #expect(
            StatusPreferences.filterReason(notification(.message, chat: "noisy"), for: muted)?.rawValue == "muted_chat")

        let noMentions = try registration {
            $0.blockMentions = true
            $0.allowedMentionsChatList = [hash("general")]
        }
        #expect(
            StatusPreferences.filterReason(notification(.mention, chat: "general"), for: noMentions)?.rawValue
                == "mentions_blocked")
        #expect(StatusPreferences.filterReason(notification(.message, chat: "general"), for: noMentions) == nil)
        // Mentions only from the chats listed.
        #expect(
            StatusPreferences.filterReason(notification(.mention, chat: "elsewhere"), for: plain)?.rawValue
                == "mention_not_allowed")

        let contactsOnly = try registration { $0.allowFromContactsOnly = true }
        #expect(
            StatusPreferences.filterReason(notification(.message, chat: "general"), for: contactsOnly)?.rawValue
                == "contacts_only")
        let contactsWithList = try registration {
            $0.allowFromContactsOnly = true
            $0.allowedKeyList = [Data([1, 2, 3])]
        }
        #expect(StatusPreferences.filterReason(notification(.message, chat: "general"), for: contactsWithList) == nil)
    }

    @Test func uuidSyntax() {
        #expect(StatusCrypto.isUUID("b6ae4fde-bb65-11ea-b3de-0242ac130004"))
        #expect(StatusCrypto.isUUID("B6AE4FDE-BB65-11EA-B3DE-0242AC130004"))
        #expect(!StatusCrypto.isUUID("b6ae4fde-bb65-11ea-b3de-0242ac13000"))
        #expect(!StatusCrypto.isUUID("b6ae4fdexbb65-11ea-b3de-0242ac130004"))
        #expect(!StatusCrypto.isUUID("g6ae4fde-bb65-11ea-b3de-0242ac130004"))
        #expect(!StatusCrypto.isUUID(""))
    }
}
