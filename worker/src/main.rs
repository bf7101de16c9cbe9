//! `worker`: joins a preprocessing cluster. Not implemented yet; exits with status 2.

fn main() {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        println!(
            "worker — joins a probeflow preprocessing cluster (coordinator at host:port).\n\n\
             Not implemented yet: the preprocessing job comes with a later release.\n\
             Today probeflow provides the shard format (probeflow-reader) and the Python package."
        );
        return;
    }
    eprintln!("worker: the preprocessing job is not implemented yet (see README, \"Status\")");
    std::process::exit(2);
}
