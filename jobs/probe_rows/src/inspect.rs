//! `coordinator inspect`: a shard's rows in human form.

use std::fmt::Write;
use std::path::Path;

use probeflow_reader::array_record::{ArrayRecordReader, RecordBuf};
use probeflow_reader::row::decode_row;

use probeflow_engine::error::Result;

/// Describes the shard and row `row` (or the first row), with its first `limit` measurements.
pub fn inspect(path: &Path, row: Option<u64>, limit: usize) -> Result<String> {
    let reader = ArrayRecordReader::open(path)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} rows, {} bytes, options {}",
        path.display(),
        reader.len(),
        reader.file_size(),
        reader.writer_options().unwrap_or("(none)")
    );
    if reader.is_empty() {
        return Ok(out);
    }
    let index = row.unwrap_or(0);
    let mut buf = RecordBuf::new();
    let record = reader.read(index, &mut buf)?;
    let view = decode_row(record)?;
    let m = &view.meta;
    let _ = writeln!(
        out,
        "row {index}: src_addr {} (IPv{}), src_id {}, part {}, {} measurements, {} bytes\n  from {} to {}",
        m.src_addr,
        m.ip_version(),
        m.src_id,
        m.part,
        m.n_measurements,
        record.len(),
        human_time(m.first_time),
        human_time(m.last_time)
    );
    let _ = writeln!(
        out,
        "  {:<21} {:<40} {:>12}",
        "time (UTC)", "destination", "rtt"
    );
    for i in 0..view.len().min(limit) {
        let rtt = match view.rtt(i) {
            Some(c) => format!("{:.3} ms", c.millis()),
            None => "failed".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:<21} {:<40} {:>12}",
            human_time(view.event_time(i)),
            view.dst_addr(i),
            rtt
        );
    }
    if view.len() > limit {
        let _ = writeln!(out, "  … {} more", view.len() - limit);
    }
    Ok(out)
}

/// `YYYY-MM-DD HH:MM:SS` for unix seconds (UTC, proleptic Gregorian).
pub fn human_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn times() {
        assert_eq!(super::human_time(0), "1970-01-01 00:00:00");
        assert_eq!(super::human_time(1_767_225_600), "2026-01-01 00:00:00");
        assert_eq!(super::human_time(951_782_400 + 3661), "2000-02-29 01:01:01");
    }
}
