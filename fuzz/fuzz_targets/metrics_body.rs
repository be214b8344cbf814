//! Fuzzes the target-metrics reader (`metrics = { url = ... }`) on a whole answer a metrics
//! endpoint sends: no input may panic, a body is never longer than the answer, an error
//! names the URL. Its framing is the load's HTTP/1.1 parser (`wire::http1`), fuzzed read by
//! read in `http_response`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::observe::metrics::{answer_body, json_body};

const URL: &str = "http://127.0.0.1:9/metrics";

fuzz_target!(|input: &[u8]| {
    match answer_body(URL, input) {
        Ok(body) => {
            assert!(body.len() <= input.len());
            if let Err(e) = json_body(URL, &body) {
                assert!(e.to_string().contains(URL));
            }
        }
        Err(e) => assert!(e.to_string().contains(URL), "{e}"),
    }
});
