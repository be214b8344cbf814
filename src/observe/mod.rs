//! What is measured beside the load: process CPU, context switches, per-core busy %, perf counters.
