//! Every error `code` the API answers, in one list: its HTTP status(es) and what it means.
//! Errors name a [`Code`], never a loose string; the OpenAPI document's `Error.code` enum and
//! the merchant docs' table (`docs/errors.md`) are rendered from this list, and a test keeps
//! both equal to it (`CHAINSUB_WRITE_GENERATED=1` rewrites them).

macro_rules! codes {
    ($( $variant:ident = $text:literal, [$($status:literal),+], $meaning:literal; )*) => {
        /// An error code of the API.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $( #[doc = $meaning] $variant, )*
        }

        impl Code {
            /// Every code, in the order of the list.
            pub const ALL: &'static [Code] = &[$(Code::$variant),*];

            /// The code as the JSON error carries it.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text),* }
            }

            /// The HTTP statuses it comes with.
            pub fn statuses(self) -> &'static [u16] {
                match self { $(Code::$variant => &[$($status),+]),* }
            }

            /// What it means and what to do about it.
            pub fn meaning(self) -> &'static str {
                match self { $(Code::$variant => $meaning),* }
            }
        }
    };
}

codes! {
    ParameterInvalid = "parameter_invalid", [400], "A field, query parameter or header has a value the API does not accept; `param` names it and the message says why.";
    ParameterMissing = "parameter_missing", [400], "A required field or parameter is absent; `param` names it.";
    ParameterUnknown = "parameter_unknown", [400], "A field or query parameter the endpoint does not take (a typo is never ignored); `param` names it.";
    BodyInvalid = "body_invalid", [400], "The body is not the JSON object the endpoint takes.";
    BodyUnreadable = "body_unreadable", [400], "The body could not be read (a broken upload).";
    HeaderInvalid = "header_invalid", [400], "A header has a value the API cannot read; `param` names it.";
    SignatureInvalid = "signature_invalid", [400], "A wallet signature is not a 65-byte hex signature.";
    SiweMessageInvalid = "siwe_message_invalid", [400], "The sign-in message is not a well-formed EIP-4361 message.";
    PermitSignatureInvalid = "permit_signature_invalid", [400], "The EIP-2612 permit signature does not recover to the subscribing wallet.";
    PermitExpired = "permit_expired", [400], "The permit's deadline has passed; sign a new one.";
    PermitUnsupported = "permit_unsupported", [400], "The token does not offer EIP-2612 permits; approve, then subscribe.";
    CheckoutLinkIncomplete = "checkout_link_incomplete", [400], "A checkout link without its signature, with an empty customer, or with a parameter the signature does not cover.";
    InvalidApiKey = "invalid_api_key", [401], "Missing, malformed, unknown or revoked API key; send `Authorization: Bearer sk_live_…`.";
    SessionRequired = "session_required", [401], "A dashboard call without a valid session; sign in with the wallet.";
    SiweRejected = "siwe_rejected", [401], "The sign-in message is for another domain, chain or time, or was not signed by its address.";
    SiweNonceInvalid = "siwe_nonce_invalid", [401], "The sign-in nonce is unknown, used or expired; request a new one.";
    WalletProofRequired = "wallet_proof_required", [401], "The account page's list needs the wallet's signed challenge.";
    WalletProofInvalid = "wallet_proof_invalid", [401], "The wallet proof was signed by another key, or for another message.";
    WalletProofExpired = "wallet_proof_expired", [401], "The wallet proof has lapsed (30 minutes); sign a new challenge.";
    CsrfTokenInvalid = "csrf_token_invalid", [403], "A state-changing dashboard call without the session's CSRF token.";
    CheckoutSignatureInvalid = "checkout_signature_invalid", [403], "The checkout link was changed after it was signed.";
    CheckoutLinkExpired = "checkout_link_expired", [403], "The checkout link is past its expiry; ask the merchant for a new one.";
    NotSubscriber = "not_subscriber", [403], "The connected wallet is not this subscription's subscriber.";
    ResourceMissing = "resource_missing", [404], "No such object — or another merchant's, which is never revealed.";
    RouteNotFound = "route_not_found", [404], "No route serves this path (see /api/v1/openapi.json).";
    MethodNotAllowed = "method_not_allowed", [405], "The path exists but not with this method; `Allow` lists the methods.";
    RequestTimeout = "request_timeout", [408], "The request body did not arrive within the body timeout.";
    SlugTaken = "slug_taken", [409], "Another plan of this merchant has this slug.";
    PlanNotActive = "plan_not_active", [409], "The plan is not provisioned on chain yet (or its provisioning failed).";
    PlanInactive = "plan_inactive", [409], "The plan was deactivated: no new subscriptions.";
    PlanMismatch = "plan_mismatch", [409], "The plan on chain differs from the terms the checkout showed.";
    SubscriptionTerminal = "subscription_terminal", [409], "The subscription is already cancelled or ended.";
    SubscriptionAlreadyCancelling = "subscription_already_cancelling", [409], "The subscription is already set to end at the end of its period.";
    SubscriptionNotCancellable = "subscription_not_cancellable", [409], "Its plan was not created through the service: only the merchant's or the subscriber's wallet can cancel it.";
    NothingToRefund = "nothing_to_refund", [409], "Nothing of the subscription's latest charged period is left to refund: it is in its free trial, or the period is refunded in full.";
    SubscriptionNotActive = "subscription_not_active", [409], "Only an active subscription that is not ending at period end changes plan (a trial changes after it, a past-due one once paid).";
    SubscriptionChanged = "subscription_changed", [409], "The chain shows another subscription under this id (a reorganization); retry once the index has caught up.";
    CancellationInProgress = "cancellation_in_progress", [409], "Another request is sending this cancellation; retry shortly (never stored under an Idempotency-Key).";
    IdempotencyKeyReused = "idempotency_key_reused", [409], "This Idempotency-Key was used with a different request.";
    IdempotencyKeyInUse = "idempotency_key_in_use", [409], "A request with this Idempotency-Key is in flight; retry shortly.";
    DeliveryInFlight = "delivery_in_flight", [409], "The delivery is being attempted right now.";
    DeliveryRetracted = "delivery_retracted", [409], "The delivery's event was removed by a reorganization (an `event.retracted` event says so).";
    LengthRequired = "length_required", [411], "A request body needs Content-Length or chunked encoding.";
    PayloadTooLarge = "payload_too_large", [413], "The body is over 64 KiB.";
    UnsupportedMediaType = "unsupported_media_type", [415], "The body must be `application/json`.";
    RateLimited = "rate_limited", [429], "Over the per-key or per-client rate; wait for `Retry-After`.";
    PlanQuotaExceeded = "plan_quota_exceeded", [429], "The merchant's plan creations for the last 24 hours are used up; retry after `Retry-After`.";
    RelayerQuotaExceeded = "relayer_quota_exceeded", [429], "The merchant's relayer transactions for the last 24 hours are used up; retry after `Retry-After`.";
    ExportInProgress = "export_in_progress", [429], "One ledger export per merchant runs at a time; retry when it has ended.";
    ExportsBusy = "exports_busy", [429], "As many ledger exports as the service runs at once are running; retry shortly.";
    // Written by the accept loop of `chainsub-serve` (every listener), before any route runs.
    MalformedRequest = "malformed_request", [400], "The request is not valid HTTP/1.1 (its request line or a header line); the connection is closed.";
    RequestHeaderTooLarge = "request_header_too_large", [431], "The request line and headers are over 64 KiB or 100 lines; the connection is closed.";
    TooManyConnections = "too_many_connections", [429, 503], "429: this client holds as many connections as one client may (reuse them); 503: every connection of the server has a request in flight.";
    InternalError = "internal_error", [500], "A failure of the service; the request id is in its log.";
    ServiceUnavailable = "service_unavailable", [503], "The database (or another dependency) is unreachable; retry.";
    Starting = "starting", [503], "The process is starting (waiting for its database); retry shortly.";
    ChainUnavailable = "chain_unavailable", [503], "The chain's RPC could not be reached; nothing was sent, unless the message says it may have been.";
    RelayerUnavailable = "relayer_unavailable", [503], "This deployment has no relayer key: the merchant's wallet acts on chain instead.";
    RelayerUnderfunded = "relayer_underfunded", [503], "The relayer cannot pay for gas; the operator has been alerted.";
    RelayerNotOperator = "relayer_not_operator", [503], "The relayer key is not the contract's operator; the operator has been alerted.";
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The merchant docs' table of codes (`docs/errors.md`, between its markers).
pub fn markdown_table() -> String {
    let mut out = String::from("| code | status | meaning |\n|---|---|---|\n");
    for c in Code::ALL {
        let statuses: Vec<String> = c.statuses().iter().map(u16::to_string).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            c.as_str(),
            statuses.join(", "),
            c.meaning()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case_with_a_status_and_a_meaning() {
        let mut seen = std::collections::HashSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "{} twice", c.as_str());
            assert!(
                c.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                c.as_str()
            );
            assert!(c.statuses().iter().all(|s| (400..600).contains(s)));
            assert!(c.meaning().ends_with('.'), "{}", c.as_str());
        }
    }
}
