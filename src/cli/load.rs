//! `stairbench load URL`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::live::LiveOutputs;
use crate::analyze::thresholds::{self, Threshold, ThresholdError, ThresholdVerdict};
use crate::load::protocol::grpc::GrpcStream;
use crate::load::protocol::grpc_message::{self, Method, Schema};
use crate::load::protocol::grpc_reflection;
use crate::load::raw::RawSink;
use crate::load::template::grpc::{self as grpc_json, Message};
use crate::load::template::RequestFile;
use crate::load::{Distribution, LoadConfig, LoadError, LoadOutcome, ProtoOptions};
use crate::record::hlog::HlogSink;
use crate::record::load::{IntervalLine, IntervalSink, LoadReport};
use crate::sweep::progress::LiveStep;
use crate::units;

/// Exit status when the load ran but more requests failed than `--max-error-ratio` allows.
pub const EXIT_ERRORS: u8 = 3;
/// Exit status when the load could not run (target unreachable, too few file descriptors).
pub const EXIT_CANNOT_RUN: u8 = 1;
/// Exit status after Ctrl-C.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Options of `stairbench load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Target: http://HOST:PORT/PATH, https://HOST:PORT/PATH, h2c://HOST:PORT/PATH,
    /// grpc://HOST:PORT/PACKAGE.SERVICE/METHOD (gRPC calls over HTTP/2; grpcs:// over TLS),
    /// redis://HOST:PORT, memcache://HOST:PORT, msgr://HOST:PORT, shm://NAME (a `stairbench serve shmkv` region) or
    /// kvd://NAME (a `stairbench serve kvd` daemon).
    pub url: String,
    /// Connections in total.
    #[arg(short, long, default_value_t = 10)]
    pub connections: usize,
    /// Generator threads (default: one per --cpuset CPU, else 1).
    #[arg(short, long)]
    pub threads: Option<usize>,
    /// Length of the measured window (10, 10s, 500ms, 1m).
    #[arg(short, long, default_value = "10s", value_parser = crate::units::parse_duration)]
    pub duration: std::time::Duration,
    /// Load run before the measured window and left out of its statistics.
    #[arg(long, default_value = "0s", value_parser = crate::units::parse_duration)]
    pub warmup: std::time::Duration,
    /// A request unanswered for this long fails (kind `timeout`); the final drain waits no longer.
    #[arg(long, default_value = "10s", value_parser = crate::units::parse_duration)]
    pub timeout: std::time::Duration,
    /// Requests in flight per connection (pipelined).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Open loop: total requests per second on a schedule; latency from the intended send time.
    // Negative numbers are read as values, so `--rate -5` gets the range message, not clap's
    // advice to write `-- -5`.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Open loop: evenly spaced requests (uniform) or seeded exponential gaps (poisson).
    #[arg(long, default_value = "uniform")]
    pub arrivals: crate::load::arrivals::Arrivals,
    /// Ramp linearly from FROM to TO over DURATION from the start of the measured window, then
    /// hold TO: the rate with --rate (replacing its value), else the connections (TO are opened).
    #[arg(long, value_name = "FROM:TO:DURATION")]
    pub ramp: Option<crate::load::arrivals::Ramp>,
    /// Pin the generator threads to these CPUs (e.g. 1 or 2-3).
    #[arg(long)]
    pub cpuset: Option<crate::cpuset::CpuList>,
    /// Write the result as JSON to FILE (- for standard output).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one histogram per second, nanoseconds).
    #[arg(long, value_name = "FILE")]
    pub hist_log: Option<PathBuf>,
    /// Write every per-second line with its histogram, the window's wall-clock times and its
    /// whole histogram as JSON lines (what `stairbench run` fetches from other hosts).
    #[arg(long, value_name = "FILE")]
    pub raw: Option<PathBuf>,
    /// Start the warm-up when this host's wall clock reads UNIX_NS (ns since the epoch), once
    /// the connections are open: loads on several hosts then measure the same window.
    #[arg(long, value_name = "UNIX_NS")]
    pub start_at: Option<i64>,
    /// -q: no per-second lines; -v: accepted, as on `run` (load prints them all already).
    #[command(flatten)]
    pub verbosity: super::shell::LoadVerbosity,
    /// --json-lines, --metrics-listen.
    #[command(flatten)]
    pub live: super::live::LiveArgs,
    /// A pass/fail gate on the result, METRIC OP VALUE (e.g. 'p99_ms<5', 'throughput_rps>=1000';
    /// metrics p99_ms, p50_ms, throughput_rps, error_ratio); exit 4 when one is not met
    /// (repeatable).
    #[arg(long = "threshold", value_name = "EXPR", value_parser = parse_threshold)]
    pub thresholds: Vec<Threshold>,
    /// Exit with status 3 when errors / (requests + errors) in the measured window is above R.
    #[arg(long, value_name = "R", default_value_t = 0.01, value_parser = parse_ratio)]
    pub max_error_ratio: f64,
    /// HTTP method.
    #[arg(long, default_value = "GET", help_heading = "HTTP")]
    pub method: String,
    /// Extra HTTP header, "Name: value" (repeatable); on grpc:// it is metadata, a `-bin` key's
    /// value sent base64-encoded.
    #[arg(long = "header", short = 'H', help_heading = "HTTP")]
    pub headers: Vec<String>,
    /// HTTP request body.
    #[arg(long, help_heading = "HTTP")]
    pub body: Option<String>,
    /// The request message of every call: FILE's bytes (serialized protobuf), framed as
    /// gRPC's length-prefixed message [default: the empty message].
    #[arg(long, value_name = "FILE", help_heading = "gRPC")]
    pub body_file: Option<PathBuf>,
    /// The .proto file that defines the call's method, compiled in-process (no protoc): the
    /// message comes from --data/--data-file as JSON, encoded with the method's input type.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "gRPC",
        conflicts_with = "protoset"
    )]
    pub proto: Option<PathBuf>,
    /// A directory --proto's imports are looked up in (repeatable; the .proto's own directory
    /// is searched last).
    #[arg(long = "import-path", value_name = "DIR", help_heading = "gRPC")]
    pub import_paths: Vec<PathBuf>,
    /// The method's types from a FileDescriptorSet (protoc --descriptor_set_out
    /// --include_imports, buf build -o) instead of --proto.
    #[arg(long, value_name = "FILE", help_heading = "gRPC")]
    pub protoset: Option<PathBuf>,
    /// The method's types from the server's reflection service (grpc.reflection.v1, else
    /// v1alpha), asked before the load: what --data without --proto or --protoset does; alone,
    /// it lets --verbose show the first reply decoded.
    #[arg(long, help_heading = "gRPC", conflicts_with_all = ["proto", "protoset", "body_file"])]
    pub reflect: bool,
    /// The request message as JSON (protobuf's JSON mapping), e.g. '{"name":"Joe"}'; checked
    /// before the load and encoded once, or per call where it holds placeholders ({seq},
    /// {conn}, {uniform:N}, {zipf:THETA:N}, {rand:BYTES}; {{ is a literal {) in string
    /// values or standing for a number ("id": {seq}); its types from --proto, --protoset or,
    /// with neither, the server's reflection service [default with --proto: {}].
    #[arg(long, value_name = "JSON", help_heading = "gRPC", conflicts_with_all = ["data_file", "body_file"])]
    pub data: Option<String>,
    /// --data from FILE.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "gRPC",
        conflicts_with = "body_file"
    )]
    pub data_file: Option<PathBuf>,
    /// Each call's deadline, sent as `grpc-timeout` (the server ends a call past it with
    /// DEADLINE_EXCEEDED); e.g. 200ms.
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, help_heading = "gRPC")]
    pub deadline: Option<std::time::Duration>,
    /// Messages each call sends on a client-streaming or bidirectional method, then ends its
    /// side [default: 1]; the method's kind comes from --proto (or the server's reflection).
    /// Without either, every call sends N messages and its reply is read as a stream (any
    /// number of messages, counted).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000), help_heading = "gRPC")]
    pub stream_messages: Option<u32>,
    /// Number of distinct keys [default: 1024; kvd://: the daemon's keys per rank × ranks].
    #[arg(long, help_heading = "Key-value (redis, memcache)")]
    pub keys: Option<u64>,
    /// Share of GETs (the rest are SETs), 0 to 1.
    #[arg(
        long,
        default_value_t = 1.0,
        help_heading = "Key-value (redis, memcache)"
    )]
    pub read_ratio: f64,
    /// SET value size in bytes.
    #[arg(
        long,
        default_value_t = 16,
        help_heading = "Key-value (redis, memcache)"
    )]
    pub value_size: usize,
    /// Key distribution: uniform or zipf:THETA (0 < THETA < 1).
    #[arg(long, default_value = "uniform", value_parser = parse_distribution, help_heading = "Key-value (redis, memcache)")]
    pub distribution: Distribution,
    /// Seed; connection i draws keys with seed*1000+i.
    #[arg(
        long,
        default_value_t = 1,
        help_heading = "Key-value (redis, memcache)"
    )]
    pub seed: u64,
    /// SET every key (--keys, --value-size) before the load, so GETs find them; these SETs
    /// count in `sent`.
    #[arg(long, help_heading = "Key-value (redis, memcache)")]
    pub preload: bool,
    /// memcache://: text (get, set) or meta (mg, ms: memcached 1.6 and later) commands.
    #[arg(
        long,
        default_value = "text",
        help_heading = "Key-value (redis, memcache)"
    )]
    pub memcache_commands: crate::load::protocol::memcache::Commands,
    /// Requests from FILE (HTTP requests or redis commands with placeholders, see README)
    /// instead of --method/--body or redis's GET/SET; -H headers are added to each.
    #[arg(long, value_name = "FILE", help_heading = "Templates")]
    pub requests: Option<PathBuf>,
    /// How each connection picks from --requests: weighted (at random by weight) or
    /// sequential (in file order).
    #[arg(long, default_value = "weighted", help_heading = "Templates")]
    pub order: crate::load::template::Order,
    /// Request and reply payload size in bytes.
    #[arg(long, default_value_t = 4096, help_heading = "msgr")]
    pub msg_size: usize,
    /// TLS and connection options.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS (`https://`) and connection-reuse options of `stairbench load`.
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// Accept any server certificate (self-signed, expired, another name).
    #[arg(long, help_heading = "TLS")]
    pub insecure: bool,
    /// Verify the server's certificate with the CA certificates of this PEM file (instead of
    /// the system's).
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub cacert: Option<PathBuf>,
    /// Resume TLS sessions on reconnects (abbreviated handshakes); without it every
    /// connection makes a full handshake.
    #[arg(long, help_heading = "TLS")]
    pub tls_resume: bool,
    /// HTTP: send every request on a new connection (`Connection: close`; --depth 1), so each
    /// pays a connection set-up and, over TLS, a handshake.
    #[arg(long, help_heading = "HTTP")]
    pub new_connection_per_request: bool,
    /// HTTP/2 with prior knowledge on http:// (the same as h2c://); streams per connection =
    /// --depth; closed loop only.
    #[arg(long, help_heading = "HTTP")]
    pub http2: bool,
    /// Connect from these local addresses, round-robin: a range A-B and/or a comma list (e.g.
    /// 127.0.0.2-127.0.0.9); each holds up to 90% of the ephemeral port range to the target.
    /// Without it, a loopback target with more connections than one address holds is reached
    /// from 127.0.0.1, .2, ... as many as needed.
    #[arg(long, value_name = "ADDRS", help_heading = "Connections")]
    pub source_addrs: Option<crate::load::sources::SourceAddrs>,
    /// Open at most N connections per second (in total), instead of all at once: a burst of
    /// thousands of connects overflows the server's listen backlog. The set-up time is reported.
    #[arg(long, value_name = "N", value_parser = parse_connect_rate, help_heading = "Connections")]
    pub connect_rate: Option<f64>,
    /// What one generator thread's connections may hold together of replies not yet whole, in
    /// MiB: half is split evenly among them, half lent to the replies that outgrow their share;
    /// a reply refused is an error `reply_over_budget` (one over 64 MiB: `reply_too_large`).
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1 << 20), help_heading = "Connections")]
    pub reply_budget_mib: u64,
}

fn parse_connect_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 1.0 => Ok(r),
        _ => Err("expected connections per second, at least 1 (e.g. 2000)".into()),
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err("expected a positive number of requests per second (e.g. 5000)".into()),
    }
}

fn parse_threshold(s: &str) -> Result<Threshold, String> {
    let t: Threshold = s.parse().map_err(|e: ThresholdError| e.to_string())?;
    if t.metric.needs_server() {
        return Err(format!(
            "{}: load does not observe the server; check it in a run spec's [[thresholds]]",
            t.metric.name()
        ));
    }
    Ok(t)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio between 0 and 1")),
    }
}

fn parse_distribution(s: &str) -> Result<Distribution, String> {
    if s == "uniform" {
        return Ok(Distribution::Uniform);
    }
    let theta = s
        .strip_prefix("zipf:")
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("bad distribution {s:?}: use uniform or zipf:THETA"))?;
    Ok(Distribution::Zipf(theta))
}

impl LoadArgs {
    /// The engine configuration these options describe (`--requests` is read by
    /// [`LoadArgs::read_requests`]).
    pub fn config(&self) -> LoadConfig {
        let threads = self
            .threads
            .unwrap_or_else(|| self.cpuset.as_ref().map_or(1, |c| c.0.len()));
        LoadConfig {
            url: self.url.clone(),
            connections: self.connections,
            threads,
            duration: self.duration,
            warmup: self.warmup,
            timeout: self.timeout,
            depth: self.depth,
            rate_rps: self.rate,
            cpuset: self.cpuset.clone().map(|c| c.0),
            arrivals: self.arrivals,
            ramp: self.ramp,
            proto: ProtoOptions {
                method: self.method.clone(),
                headers: self.headers.clone(),
                body: self.body.clone(),
                body_file: None,
                grpc_calls: None,
                grpc_stream: None,
                // 0 asks kvd:// for its daemons' whole key space.
                keys: self.keys.unwrap_or(if self.url.starts_with("kvd://") {
                    0
                } else {
                    1024
                }),
                read_ratio: self.read_ratio,
                value_size: self.value_size,
                distribution: self.distribution,
                seed: self.seed,
                msg_size: self.msg_size,
                preload: self.preload,
                tls: self.tls_options(),
                new_connection_per_request: self.tls.new_connection_per_request,
                requests: None,
                order: self.order,
                http2: self.tls.http2,
                memcache_commands: self.memcache_commands,
            },
            connect: crate::load::sources::ConnectOptions {
                source_addrs: self.tls.source_addrs.clone().map_or(Vec::new(), |s| s.0),
                connect_rate: self.tls.connect_rate,
            },
            reply_budget_bytes: (self.tls.reply_budget_mib as usize) << 20,
        }
    }

    /// The TLS options (`--insecure`, `--cacert`, `--tls-resume`).
    fn tls_options(&self) -> crate::load::tls::TlsOptions {
        crate::load::tls::TlsOptions {
            insecure: self.tls.insecure,
            cacert: self.tls.cacert.clone(),
            resume: self.tls.tls_resume,
        }
    }

    /// Where --data's types come from: --proto (with --import-path) or --protoset; none
    /// without either (the server's reflection, asked by [`Self::reflected`]).
    fn schema(&self) -> Option<Schema> {
        match (&self.proto, &self.protoset) {
            (Some(file), _) => Some(Schema::Proto {
                file: file.clone(),
                import_paths: self.import_paths.clone(),
            }),
            (None, Some(file)) => Some(Schema::Protoset(file.clone())),
            (None, None) => None,
        }
    }

    /// The types of the service of `path` (`/PKG.SVC/METHOD`) from the server's reflection
    /// service, asked with the user's metadata within --timeout per question.
    fn reflected(&self, path: &str) -> Result<Schema, LoadError> {
        let service = path.trim_start_matches('/').split('/').next().unwrap_or("");
        let mut server = crate::load::probe::ProbeServer::new(
            &self.url,
            self.headers.clone(),
            self.tls_options(),
            self.timeout,
        );
        grpc_reflection::pool(&mut server, service)
            .map(Schema::Reflection)
            .map_err(|e| LoadError::BadInput(e.to_string()))
    }

    /// --data's text, or --data-file's.
    fn json_text(&self) -> Result<Option<String>, LoadError> {
        match (&self.data, &self.data_file) {
            (Some(text), _) => Ok(Some(text.clone())),
            (None, Some(path)) => std::fs::read_to_string(path).map(Some).map_err(|e| {
                LoadError::BadInput(format!("reading --data-file {}: {e}", path.display()))
            }),
            (None, None) => Ok(None),
        }
    }

    /// The request message encoded from --data or --data-file by --proto, --protoset or the
    /// server's reflection (`{}` when only a schema is given); none without either. A JSON
    /// the schema refuses, or a method it lacks, is bad input: refused before the load.
    pub fn json_message(&self) -> Result<Option<(Method, Message)>, LoadError> {
        let bad = |s: String| LoadError::BadInput(s);
        let json = self.json_text()?;
        let schema = self.schema();
        if json.is_none() && schema.is_none() && !self.reflect {
            return Ok(None);
        }
        let url = &self.url;
        let path = grpc_message::url_path(url).ok_or_else(|| {
            bad(format!(
                "--data, --proto, --protoset and --reflect are for gRPC calls: {url:?} is not a \
                 grpc:// or grpcs:// url"
            ))
        })?;
        let schema = match schema {
            Some(schema) => schema,
            None => self.reflected(path)?,
        };
        let method = grpc_message::method(&schema, path).map_err(|e| bad(e.to_string()))?;
        let message = grpc_json::message(&method, json.as_deref().unwrap_or("{}"))
            .map_err(|e| bad(format!("--data: {e}")))?;
        Ok(Some((method, message)))
    }

    /// A streaming call's shape: the method's (`method`, from --proto) with
    /// --stream-messages, or without a method one of N messages each way; none for a unary
    /// call.
    pub fn grpc_stream(&self, method: Option<&Method>) -> Result<Option<GrpcStream>, LoadError> {
        let bad = |s: String| LoadError::BadInput(s);
        if let (Some(_), None) = (self.stream_messages, grpc_message::url_path(&self.url)) {
            return Err(bad(format!(
                "--stream-messages is for gRPC calls: {:?} is not a grpc:// or grpcs:// url",
                self.url
            )));
        }
        match method {
            Some(m) => m
                .stream(self.stream_messages)
                .map_err(|e| bad(e.to_string())),
            None => Ok(self.stream_messages.map(|n| GrpcStream {
                messages_per_call: n,
                streamed_replies: true,
            })),
        }
    }

    /// Reads and checks the `--requests` file (an error names its file and line).
    pub fn read_requests(&self) -> Result<Option<Arc<RequestFile>>, LoadError> {
        let Some(path) = &self.requests else {
            return Ok(None);
        };
        RequestFile::read(path)
            .map(|f| Some(Arc::new(f)))
            .map_err(|e| LoadError::BadInput(e.to_string()))
    }
}

/// Runs one load, printing a line per second and a summary.
pub fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    let mut config = args.config();
    config.proto.requests = args.read_requests()?;
    if let Some(path) = &args.body_file {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading --body-file {}", path.display()))?;
        config.proto.body_file = Some(bytes.into());
    }
    let method = args.json_message()?.map(|(method, message)| {
        // --body-file is the message (--data cannot come with it); the .proto then gives
        // the method's kind and decodes --verbose's reply, and its `{}` is not sent.
        match (message, args.body_file.is_some()) {
            (_, true) => {}
            (Message::Fixed(bytes), false) => config.proto.body_file = Some(bytes.into()),
            (Message::PerCall(calls), false) => {
                config.proto.body_file = Some(calls.sample().into());
                config.proto.grpc_calls = Some(calls);
            }
        }
        method
    });
    config.proto.grpc_stream = args.grpc_stream(method.as_ref())?;
    if let Some(deadline) = args.deadline {
        config.proto.headers.push(format!(
            "grpc-timeout: {}",
            crate::load::protocol::grpc::timeout_value(deadline)
        ));
    }
    if let (Some(method), true) = (&method, args.verbosity.verbose) {
        show_first_reply(method, &config);
    }
    let stop = crate::signals::stop_flag();
    let live_step = LiveStep {
        target: config.url.clone(),
        placement: String::new(),
        clients: config.connections,
        rep: 0,
        rate_rps: config.rate_rps,
    };
    let mut sink = LineSink {
        live: args.live.open()?,
        live_step,
        quiet: args.verbosity.quiet,
        header_done: false,
        hlog: args.hist_log.as_deref().map(HlogSink::create).transpose()?,
        raw: args.raw.as_ref().map(|_| RawSink::default()),
    };
    // Created now, so a bad path fails before the load starts.
    let raw_file = args
        .raw
        .as_deref()
        .map(|p| std::fs::File::create(p).with_context(|| format!("creating {}", p.display())))
        .transpose()?;
    let outcome = match crate::load::run_at(&config, args.start_at, &mut sink, stop) {
        Ok(outcome) => outcome,
        Err(e @ LoadError::BadInput(_)) => return Err(e.into()),
        Err(e @ LoadError::Stopped) => {
            eprintln!("stairbench: {e}");
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        }
        Err(e) => {
            eprintln!("stairbench: error: {:#}", anyhow::Error::from(e));
            return Ok(ExitCode::from(EXIT_CANNOT_RUN));
        }
    };
    if let Some(h) = sink.hlog.take() {
        h.finish()?;
    }
    if let (Some(raw), Some(file)) = (sink.raw.take(), raw_file) {
        let mut out = std::io::BufWriter::new(file);
        raw.finish(&outcome, &mut out)
            .and_then(|()| out.flush())
            .context("writing the --raw file")?;
    }
    sink.live.done(&sink.live_step, &outcome.report);
    let json_on_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-")
        || args.live.json_lines_on_stdout();
    let mut out = summary_output(json_on_stdout);
    print_summary(&outcome, &mut out)?;
    let verdicts = load_verdicts(&args.thresholds, &outcome.report);
    for v in &verdicts {
        writeln!(out, "threshold: {}", v.short_sentence())?;
    }
    if let Some(path) = &args.json {
        write_json(path, &outcome, &verdicts)?;
    }
    let code = exit_code(
        &outcome.report,
        stop.load(Ordering::Relaxed),
        args.max_error_ratio,
    );
    if code == EXIT_ERRORS {
        writeln!(
            out,
            "error ratio {:.3} above --max-error-ratio {}: exit {EXIT_ERRORS}",
            outcome.report.error_ratio, args.max_error_ratio
        )?;
    }
    let code = match code {
        0 => super::gates::threshold_outcome(&verdicts).code(),
        c => c,
    };
    Ok(ExitCode::from(code))
}

/// `--verbose` with a `.proto` (or the server's reflection): one call before the load (not counted in it), its reply
/// decoded as JSON on standard error, so the user sees the server understood the message.
fn show_first_reply(method: &Method, config: &LoadConfig) {
    let reply = crate::load::probe::first_reply(&config.url, &config.proto, config.timeout)
        .map_err(|e| e.to_string())
        .and_then(|bytes| method.reply_json(&bytes).map_err(|e| e.to_string()));
    match reply {
        Ok(json) => eprintln!("first reply ({}): {json}", method.output_name()),
        Err(e) => eprintln!("first reply: none ({e})"),
    }
}

/// The thresholds checked against the load's result, as a run checks one step.
fn load_verdicts(list: &[Threshold], report: &LoadReport) -> Vec<ThresholdVerdict> {
    let mut step = crate::record::steps::StepResult::empty(
        "load".into(),
        &report.url,
        "",
        report.connections.max(1),
        0,
    );
    step.status = crate::record::steps::StepStatus::Ok;
    step.load = Some(report.clone());
    thresholds::evaluate(list, &[step])
}

/// 130 when interrupted, 3 when too many requests failed, else 0.
fn exit_code(report: &LoadReport, interrupted: bool, max_error_ratio: f64) -> u8 {
    if interrupted {
        EXIT_INTERRUPTED
    } else if report.error_ratio > max_error_ratio {
        EXIT_ERRORS
    } else {
        0
    }
}

/// The summary goes to standard output, or to standard error when the JSON goes there.
fn summary_output(json_on_stdout: bool) -> Box<dyn Write> {
    if json_on_stdout {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    }
}

/// Redis GETs found and missed; says so when misses dominate (an empty database measures
/// only misses, which are cheaper than hits).
fn print_lookups(r: &LoadReport, out: &mut dyn Write) -> anyhow::Result<()> {
    let (Some(hits), Some(misses)) = (r.redis_hits, r.redis_misses) else {
        return Ok(());
    };
    if hits + misses == 0 {
        return Ok(());
    }
    write!(out, "  GETs: {hits} found, {misses} missed")?;
    if misses > hits {
        write!(
            out,
            ": most keys are absent, so this measured misses (--preload SETs every key first)"
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// A streaming load's messages beside its calls, and the latency to a call's first reply.
fn print_stream(r: &LoadReport, out: &mut dyn Write) -> anyhow::Result<()> {
    let Some(s) = &r.grpc_stream else {
        return Ok(());
    };
    writeln!(
        out,
        "  messages: {} per call; {} sent, {} received whole (whole run); {} in the window's calls, {:.1}/s",
        s.messages_per_call, s.messages_sent, s.messages_received, s.window_messages, s.messages_per_s
    )?;
    if let Some(h) = &s.first_message_us {
        let d = units::duration_us;
        writeln!(
            out,
            "  first reply message: p50 {}  p99 {}  max {} (the call's end is the latency above)",
            d(h.p50),
            d(h.p99),
            d(h.max)
        )?;
    }
    Ok(())
}

fn write_json(
    path: &std::path::Path,
    outcome: &LoadOutcome,
    verdicts: &[ThresholdVerdict],
) -> anyhow::Result<()> {
    let mut json = serde_json::to_value(&outcome.report)?;
    if let (Some(obj), false) = (json.as_object_mut(), verdicts.is_empty()) {
        obj.insert("thresholds".into(), serde_json::to_value(verdicts)?);
    }
    let text = serde_json::to_string_pretty(&json)? + "\n";
    if path.as_os_str() == "-" {
        std::io::stdout().write_all(text.as_bytes())?;
    } else {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Prints the per-second lines in perf-crimson-msgr's shape, and feeds the interval log.
struct LineSink {
    live: LiveOutputs,
    live_step: LiveStep,
    quiet: bool,
    header_done: bool,
    hlog: Option<HlogSink>,
    raw: Option<RawSink>,
}

impl IntervalSink for LineSink {
    fn interval(&mut self, line: &IntervalLine, hist_ns: &hdrhistogram::Histogram<u64>) {
        if let Some(r) = &mut self.raw {
            r.interval(line, hist_ns);
        }
        if let Some(h) = &mut self.hlog {
            if line.elapsed_s > 0.0 {
                h.interval(line, hist_ns);
            }
        }
        self.live.interval(&self.live_step, line, hist_ns);
        if self.quiet {
            return;
        }
        if !self.header_done {
            eprintln!(
                "{:>6} {:>8} {:>11} {:>9} {:>9} -- busy%",
                "sec", "inflight", "ops/s", "MB/s", "mean lat"
            );
            self.header_done = true;
        }
        let busy: Vec<String> = line
            .per_core_busy
            .iter()
            .map(|b| format!("{b:.0}"))
            .collect();
        eprintln!(
            "{:>6.1} {:>8} {:>11.1} {:>9.2} {:>9} -- {}{}",
            line.elapsed_s,
            line.inflight,
            line.ops_per_s,
            line.mb_per_s,
            units::duration_us(line.mean_latency_ms * 1e3),
            busy.join(","),
            if line.errors > 0 {
                format!("  errors {}", line.errors)
            } else {
                String::new()
            }
        );
    }
}

/// The latency lines of the summary, each figure in its readable unit.
fn print_latency(r: &LoadReport, out: &mut dyn Write) -> anyhow::Result<()> {
    let l = &r.latency_us;
    let d = units::duration_us;
    writeln!(
        out,
        "  latency: mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        d(l.mean),
        d(l.p50),
        d(l.p90),
        d(l.p99),
        d(l.p999),
        d(l.max)
    )?;
    if let (Some(u), Some(o)) = (&r.uncorrected_latency_us, r.omitted) {
        writeln!(
            out,
            "  uncorrected (from actual send): p50 {}  p99 {}  max {}; {o} requests left late",
            d(u.p50),
            d(u.p99),
            d(u.max)
        )?;
    }
    if let (Some(late), Some(lag_us)) = (r.late_sends, r.send_lag_p99_us) {
        writeln!(
            out,
            "  send lag p99 {}; {late} sends left late with a connection free",
            d(lag_us)
        )?;
    }
    Ok(())
}

fn print_summary(outcome: &LoadOutcome, out: &mut dyn Write) -> anyhow::Result<()> {
    let r = &outcome.report;
    writeln!(
        out,
        "{} over {:.2} s: {} requests, {:.1} req/s, {:.2} MB/s in",
        r.url,
        r.duration_s,
        r.requests,
        r.throughput_rps,
        r.bytes_received as f64 / 1e6 / r.duration_s.max(1e-9)
    )?;
    print_latency(r, out)?;
    let d = units::duration_us;
    let busy: Vec<String> = r
        .client_cpu
        .per_core_busy
        .iter()
        .map(|b| format!("{b:.0}%"))
        .collect();
    writeln!(
        out,
        "  sent {} (warm-up and drain included; {} re-sent after a close), errors: {} (ratio {:.4})",
        r.sent,
        r.resent,
        match r.errors.is_empty() {
            true => "none".to_string(),
            false => crate::record::load::errors_text(&r.errors, &r.error_statuses),
        },
        r.error_ratio
    )?;
    print_lookups(r, out)?;
    print_stream(r, out)?;
    writeln!(
        out,
        "  set-up: {} connections open in {} (mean connect {})",
        r.connections,
        d(r.setup_s * 1e6),
        d(r.connect_time_s * 1e6)
    )?;
    if let (Some(n), Some(h)) = (r.tls_handshakes, &r.tls_handshake_us) {
        writeln!(
            out,
            "  TLS handshakes: {n} (whole run, {} resumed): p50 {}  p99 {}  max {} (not in the request latency)",
            r.tls_resumed.unwrap_or(0),
            d(h.p50),
            d(h.p99),
            d(h.max)
        )?;
    }
    writeln!(
        out,
        "  client cpu: user {:.2} s, sys {:.2} s, busy {}{}",
        r.client_cpu.user_s,
        r.client_cpu.sys_s,
        busy.join(" "),
        if r.client_saturated {
            "  (SATURATED: this measured the client, not the server)"
        } else {
            ""
        }
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_writes_each_latency_in_its_readable_unit() {
        let mut r = LoadReport::default();
        r.latency_us.mean = 57.14;
        r.latency_us.p50 = 9_999.0;
        r.latency_us.p90 = 10_000.0;
        r.latency_us.p99 = 302_776.3;
        r.latency_us.p999 = 12_345_678.0;
        r.latency_us.max = f64::NAN;
        r.send_lag_p99_us = Some(1.2);
        r.late_sends = Some(3);
        let mut out = Vec::new();
        print_latency(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "  latency: mean 57.1 µs  p50 9999 µs  p90 10.0 ms  p99 303 ms  p99.9 12.3 s  max –\n  \
             send lag p99 1.20 µs; 3 sends left late with a connection free\n"
        );
    }
}
