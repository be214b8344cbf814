//! gRPC unary calls (`grpc://`, `grpcs://`): HTTP/2 POSTs to `/PACKAGE.SERVICE/METHOD` whose
//! body is one length-prefixed message, sent by the HTTP/2 threads ([`crate::load::h2`]);
//! each response's framing and `grpc-status` are read by [`crate::wire::grpc`].

use crate::wire::grpc;

/// The headers every call carries beside the user's (`-H`, gRPC's metadata).
pub const HEADERS: [(&str, &str); 2] = [("content-type", grpc::CONTENT_TYPE), ("te", "trailers")];

/// How a streaming call is made and read (none for a unary call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcStream {
    /// Messages each call sends, then ends its side (client-streaming and bidirectional
    /// calls; 1 otherwise).
    pub messages_per_call: u32,
    /// The reply is a stream (server-streaming and bidirectional calls): any number of
    /// messages ends a successful call, each is counted and the first timed.
    pub streamed_replies: bool,
}

/// A target's gRPC request: its message's bytes and, for a streaming method, the call's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcMessage {
    /// The message (serialized protobuf, unframed).
    pub bytes: std::sync::Arc<[u8]>,
    /// A streaming call's shape; none for a unary call.
    pub stream: Option<GrpcStream>,
}

/// Checks a call's path: `/PACKAGE.SERVICE/METHOD` (the package may be empty, the service
/// and method may not).
pub fn check_path(path: &str) -> Result<(), String> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts[..] {
        [service, method]
            if path.starts_with('/') && !service.is_empty() && !method.is_empty() =>
        {
            Ok(())
        }
        _ => Err(format!(
            "{path:?} is not a gRPC method: expected /PACKAGE.SERVICE/METHOD (e.g. /helloworld.Greeter/SayHello)"
        )),
    }
}

/// A metadata value as sent: a `-bin` key's value is binary, so it goes base64-encoded
/// (unpadded, as gRPC's spec asks senders to); any other value as it is.
pub fn metadata_value(name: &str, value: &str) -> String {
    use base64::Engine as _;
    match name.to_ascii_lowercase().ends_with("-bin") {
        true => base64::engine::general_purpose::STANDARD_NO_PAD.encode(value),
        false => value.to_string(),
    }
}

/// `--deadline` as a `grpc-timeout` value: at most 8 digits and a unit, the finest unit that
/// fits (rounded up, so the server never sees a shorter deadline than asked).
pub fn timeout_value(deadline: std::time::Duration) -> String {
    let ns = deadline.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (per, unit) in units {
        let n = ns.div_ceil(per);
        if n < 100_000_000 {
            return format!("{n}{unit}");
        }
    }
    "99999999H".into()
}

/// The error kind of a call that ended with a non-zero status: `grpc_status`, its code, the
/// code's name and the server's `grpc-message`.
pub fn status_kind(code: u32, message: &str) -> String {
    let name = grpc::code_name(code);
    if message.is_empty() {
        format!("grpc_status {code} {name}")
    } else {
        format!("grpc_status {code} {name}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_a_service_and_a_method() {
        assert!(check_path("/helloworld.Greeter/SayHello").is_ok());
        assert!(check_path("/Svc/M").is_ok());
        for bad in ["/", "/a", "/a/", "//m", "/a/b/c", "a/b"] {
            assert!(
                check_path(bad).unwrap_err().contains("PACKAGE.SERVICE"),
                "{bad}"
            );
        }
    }

    #[test]
    fn bin_metadata_is_base64_and_timeouts_fit_eight_digits() {
        assert_eq!(metadata_value("trace-bin", "hi\u{0}"), "aGkA");
        assert_eq!(metadata_value("Trace-Bin", "a"), "YQ");
        assert_eq!(metadata_value("user", "hi"), "hi");
        let ms = std::time::Duration::from_millis;
        assert_eq!(timeout_value(ms(200)), "200000u");
        assert_eq!(
            timeout_value(std::time::Duration::from_nanos(1500)),
            "1500n"
        );
        assert_eq!(timeout_value(ms(100_000)), "100000m");
        assert_eq!(
            timeout_value(std::time::Duration::from_secs(200_000)),
            "200000S"
        );
    }

    #[test]
    fn a_status_kind_keeps_code_name_and_message() {
        assert_eq!(
            status_kind(5, "no such key"),
            "grpc_status 5 NOT_FOUND: no such key"
        );
        assert_eq!(status_kind(14, ""), "grpc_status 14 UNAVAILABLE");
    }
}
