#!/usr/bin/env bash
# stairbench load vs wrk over TLS (https://, nginx with a certificate made by openssl): the
# setting TLS=1 of bench/vs_wrk.sh, whose header lists the others. wrk speaks TLS through
# OpenSSL; stairbench through rustls (and verifies the certificate, once per connection).
# NEW_CONNECTION=1 sends every request on a new connection (a full handshake each).
#
# Usage (after `cargo build --release`): bench/vs_wrk_tls.sh
set -euo pipefail
TLS=1 exec "$(dirname "$0")/vs_wrk.sh" "$@"
