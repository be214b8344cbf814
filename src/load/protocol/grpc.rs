//! gRPC unary calls (`grpc://`, `grpcs://`): HTTP/2 POSTs to `/PACKAGE.SERVICE/METHOD` whose
//! body is one length-prefixed message, sent by the HTTP/2 threads ([`crate::load::h2`]);
//! each response's framing and `grpc-status` are read by [`crate::wire::grpc`].

use crate::wire::grpc;

/// The headers every call carries beside the user's (`-H`, gRPC's metadata).
pub const HEADERS: [(&str, &str); 2] = [("content-type", grpc::CONTENT_TYPE), ("te", "trailers")];

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
    fn a_status_kind_keeps_code_name_and_message() {
        assert_eq!(
            status_kind(5, "no such key"),
            "grpc_status 5 NOT_FOUND: no such key"
        );
        assert_eq!(status_kind(14, ""), "grpc_status 14 UNAVAILABLE");
    }
}
