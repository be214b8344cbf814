#!/usr/bin/env bash
# The JSON-to-gRPC-message encoder (src/load/protocol/grpc_message.rs, with
# src/load/template/grpc.rs for placeholders) on INPUTS mutated messages (default 10 million;
# seeded, half of them from a message with placeholders): bytes replaced, cut and repeated. Every input is encoded once, compiled per call (one message
# rendered and decoded back by the input type) or refused with an error that starts with
# its JSON path, "the message is not JSON" or "the message's placeholders"; a panic or another
# error fails. Prints the inputs, the time and how many went each way.
#
# Then the ignored test per_call_message_cost: the nanoseconds a connection spends making a
# per-call message (draws, render, framing, copy out) against cloning the fixed one's bytes.
#
# Usage: bench/grpc_json_fuzz.sh   env: INPUTS=10000000
# (the ignored tests ten_million_mutated_messages_never_panic and per_call_message_cost, in
# the release profile.)
set -euo pipefail
cd "$(dirname "$0")/.."
INPUTS=${INPUTS:-10000000}
STAIRBENCH_FUZZ_INPUTS=$INPUTS cargo test --release --lib -- --ignored --exact \
    load::template::grpc::tests::ten_million_mutated_messages_never_panic --nocapture 2>&1 |
    grep -E '^fuzz:|test result|panicked|^thread'
cargo test --release --lib -- --ignored --exact \
    load::template::grpc::tests::per_call_message_cost --nocapture 2>&1 |
    grep -E '^message cost|test result|panicked|^thread'
