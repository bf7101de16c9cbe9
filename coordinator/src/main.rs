//! `coordinator`: runs a probeflow job of any kind (probe_rows, ngram_overlap,
//! word_count) and checks its output; `inspect` and `generate` are probe_rows's tools.
//!
//! Flags ─► the job file, read once into a validated `JobSpec` (its kind found in
//! `probeflow_jobs::KINDS`) ─► the engine's `run_job`, `status` or `verify`.
//!
//! Exit codes: 0 success (or already complete), 1 the job failed, 2 bad usage, job file,
//! output or input (`EngineError::exit_code`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use probeflow_engine::coordinator::{report, run_job, status, verify, JobSpec, RunOutcome};
use probeflow_engine::settings::Mode;
use probeflow_engine::store::StoreUrl;
use probeflow_engine::EngineError;
use probeflow_jobs::KINDS;
use probeflow_probe_rows::{inspect, synthetic};

/// The demo job, compiled in so `coordinator run` works with nothing else.
const DEMO_JOB: &str = include_str!("../../jobs/demo.toml");

#[derive(Parser)]
#[command(
    name = "coordinator",
    version,
    about = "probeflow: runs a job of any kind (probe_rows: ping measurements → per-probe rows in \
             ArrayRecord shards; ngram_overlap: train/test n-gram overlap with provenance; \
             word_count) on one machine or a cluster, and checks its output"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run (or resume) the job described by a job file.
    Run {
        /// The job file, e.g. jobs/local.toml. Without one: the embedded demo job
        /// (jobs/demo.toml: 2M generated measurements, local mode, output in out/demo).
        job: Option<PathBuf>,
        /// Serve /metrics, /livez, /readyz, /api/v1/status and a live status page on
        /// this address (ip:port, or a port alone for 127.0.0.1); overrides [run] http.
        #[arg(long, value_name = "ADDR", value_parser = parse_http)]
        http: Option<std::net::SocketAddr>,
        /// Seconds the HTTP listener keeps serving after the job ends, so that the
        /// last scrape sees how it ended; overrides [run] http_linger_seconds (60).
        #[arg(long, value_name = "SECONDS")]
        linger: Option<u64>,
    },
    /// Print the state of a running or finished job, from its output alone.
    ///
    /// With --json or --html: the model the coordinator serves (its /api/v1/status) and
    /// its status page, replayed from the output's event log (_job/events/), as of its
    /// last event; for an output of a release before the event log, what its journal
    /// holds, with what is missing said.
    Status {
        /// The job's [output] url.
        output: String,
        /// Print the model as JSON (version 1, as /api/v1/status serves it).
        #[arg(long)]
        json: bool,
        /// Write the status page (HTML, no script) to FILE.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
    /// Check a finished output of any job kind against its completion record
    /// (`_SUCCESS`): every final file's size and blake3, and no unlisted file in the
    /// kind's final directories; for probe_rows also the manifest's versions and every
    /// shard's row count. Exit 1 names the first problem.
    Verify {
        /// The job's [output] url.
        output: String,
    },
    /// probe_rows: print a shard's facts and one row's first measurements.
    Inspect {
        /// An .array_record shard file.
        shard: PathBuf,
        /// Which row (default 0).
        #[arg(long)]
        row: Option<u64>,
        /// How many measurements to show.
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// probe_rows: write RIPE-Atlas-like demo Parquet files.
    Generate {
        /// Number of measurement rows.
        #[arg(long)]
        rows: u64,
        /// Output directory (local path or s3:// URL).
        #[arg(long)]
        out: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn parse_http(text: &str) -> Result<std::net::SocketAddr, String> {
    probeflow_engine::settings::parse_http_addr(text)
}

fn exit_code(e: &EngineError) -> ExitCode {
    ExitCode::from(e.exit_code())
}

fn main() -> ExitCode {
    probeflow_engine::monitor::process::start_time();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    // The job file is read before the runtime starts: the allocator is set up for the
    // tasks this process runs itself (local mode's workers) before any thread exists.
    let spec = match &cli.command {
        Command::Run { job, http, linger } => {
            let spec = match job {
                Some(path) => JobSpec::load(path, KINDS),
                None => {
                    eprintln!("coordinator: no job file given; running the embedded demo job (jobs/demo.toml)");
                    JobSpec::parse(DEMO_JOB, "jobs/demo.toml (embedded)", KINDS)
                }
            };
            match spec {
                Ok(mut spec) => {
                    if let Some(addr) = http {
                        spec.run.http = Some(*addr);
                    }
                    if let Some(seconds) = linger {
                        spec.run.http_linger = std::time::Duration::from_secs(*seconds);
                    }
                    Some(spec)
                }
                Err(e) => {
                    eprintln!("coordinator: error: {}", e.report());
                    return exit_code(&e);
                }
            }
        }
        _ => None,
    };
    match &spec {
        Some(spec) if spec.run.mode == Mode::Local => {
            probeflow_engine::allocator::tune(spec.run.workers, spec.run.memory_per_worker)
        }
        _ => probeflow_engine::allocator::tune(0, 0),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("coordinator: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result: Result<(), EngineError> = runtime.block_on(async {
        match cli.command {
            Command::Run { .. } => {
                let Some(spec) = spec else {
                    unreachable!("a run's job file is read before the runtime starts")
                };
                match run_job(&spec, KINDS).await? {
                    RunOutcome::AlreadyComplete(summary) => {
                        println!(
                            "{}: already complete ({summary}); nothing to do",
                            spec.output_url()
                        );
                    }
                    RunOutcome::Completed { summary, tasks_run, tasks_resumed } => {
                        println!(
                            "{}: done. {summary} ({tasks_run} tasks run, {tasks_resumed} resumed from the journal)",
                            spec.output_url()
                        );
                    }
                }
                Ok(())
            }
            Command::Status {
                output,
                json: false,
                html: None,
            } => {
                print!("{}", status(&output, KINDS).await?);
                Ok(())
            }
            Command::Status { output, json, html } => {
                let model = report(&output, KINDS).await?;
                if let Some(file) = html {
                    let page = probeflow_engine::monitor::page::render(&model, false);
                    std::fs::write(&file, page).map_err(|source| EngineError::Write {
                        path: file.display().to_string(),
                        source,
                    })?;
                    eprintln!("wrote {}", file.display());
                }
                if json {
                    let json = serde_json::to_string_pretty(&model)
                        .map_err(|e| EngineError::Runtime(format!("the model as JSON: {e}")))?;
                    println!("{json}");
                }
                Ok(())
            }
            Command::Verify { output } => {
                let v = verify(&output, KINDS).await?;
                let checked = v.checked.map(|c| format!("; {c}")).unwrap_or_default();
                println!(
                    "{output}: ok: {} output, {} files, {:.1} MB match its completion record{checked}",
                    v.kind,
                    v.files,
                    v.bytes as f64 / 1e6
                );
                Ok(())
            }
            Command::Inspect { shard, row, limit } => {
                print!("{}", inspect::inspect(&shard, row, limit)?);
                Ok(())
            }
            Command::Generate { rows, out, seed } => {
                let dir = StoreUrl::parse(&out)?;
                let files = synthetic::generate(rows, seed, &dir).await?;
                println!("wrote {rows} rows in {} files under {}", files.len(), dir.url);
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coordinator: error: {}", e.report());
            exit_code(&e)
        }
    }
}
