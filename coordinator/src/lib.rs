//! probeflow's coordinator: the job spec, planning, task leases and retries, the
//! journal, the manifest, local and cluster modes (see ARCHITECTURE.md).
//!
//! Not implemented yet: this crate exists so the workspace has its final shape
//! (`coordinator → worker → reader`).

pub use probeflow_worker as worker;
