//! probeflow's worker: the map and reduce task bodies of the preprocessing job and
//! the worker actor that runs them (see ARCHITECTURE.md, "The job, step by step").
//!
//! Not implemented yet: this crate exists so the workspace has its final shape
//! (`coordinator → worker → reader`). The shard format it will write lives in
//! `probeflow_reader::array_record` and `probeflow_reader::row`.

pub use probeflow_reader as reader;
