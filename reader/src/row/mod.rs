//! Rows: one probe's measurements, the unit the job writes and the sampler reads.
//!
//! * [`codec`]: a row is an Arrow IPC stream (`event_time`, `dst_addr`, `rtt`, facts in
//!   the schema metadata); [`encode_row`] writes one, [`decode_row`] gives a zero-copy
//!   [`RowView`].
//!   [`ipc_stream`] writes the stream's bytes directly.
//! * [`builder`]: [`RowBuilder`] takes one source's time-ordered measurements and emits
//!   rows no larger than `max_row_bytes`, split at measurement boundaries (`part` 0, 1 …).
//! * [`rtt`]: the 2-byte RTT code; [`addr`]: address parsing and canonical text;
//!   [`placement`]: `src_id`, `partition` and the train/test split.

pub mod addr;
pub mod builder;
pub mod codec;
mod ipc_stream;
pub mod placement;
pub mod rtt;

pub use addr::{canonical, parse_addr};
pub use builder::{RowBuilder, DEFAULT_MAX_ROW_BYTES};
pub use codec::{decode_row, encode_row, Measurement, Row, RowMeta, RowView};
pub use placement::{partition, src_id, Split, SplitRule};
pub use rtt::RttCode;
