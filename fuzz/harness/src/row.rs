//! The row codec: decode any bytes; encode any measurements and decode them with ours
//! and with arrow-rs's own IPC reader, which must agree.

use std::net::IpAddr;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{UInt16Type, UInt64Type};
use probeflow_reader::row::codec::{decode_row, encode_row, Measurement};
use probeflow_reader::row::rtt::RttCode;

use super::split_first;

/// Decodes `data` as a row and reads every measurement of it.
pub fn decode(data: &[u8]) {
    let Ok(row) = decode_row(data) else {
        return;
    };
    let _ = row.validate_order();
    let mut seen = 0usize;
    for m in row.iter() {
        std::hint::black_box(m);
        seen += 1;
    }
    assert_eq!(seen, row.len());
}

/// Measurements from `data`: 11 bytes each (time delta, destination, RTT), IPv4 or
/// IPv6 by the first byte.
fn measurements(data: &[u8]) -> (IpAddr, Vec<Measurement>) {
    let (flags, rest) = split_first(data);
    let v6 = flags & 1 == 1;
    let src: IpAddr = if v6 {
        IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(flags)])
    } else {
        IpAddr::from([192, 0, 2, flags])
    };
    let mut time = 1_600_000_000u64;
    let ms = rest
        .chunks_exact(11)
        .map(|c| {
            time += u64::from(u16::from_le_bytes([c[0], c[1]]));
            let dst = if v6 {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
                a[12..].copy_from_slice(&c[2..6]);
                IpAddr::from(a)
            } else {
                IpAddr::from([c[2], c[3], c[4], c[5]])
            };
            let code = u16::from_le_bytes([c[6], c[7]]);
            let rtt = (c[8] & 3 != 0).then_some(RttCode(code));
            Measurement {
                event_time: time,
                dst_addr: dst,
                rtt,
            }
        })
        .collect();
    (src, ms)
}

/// Encodes the measurements of `data` as a row: our decoder and arrow-rs's IPC reader
/// read back the same measurements.
pub fn roundtrip(data: &[u8]) {
    let (src, ms) = measurements(data);
    let Ok(row) = encode_row(src, 0, &ms) else {
        return;
    };
    let ours = decode_row(&row.bytes).expect("our own row decodes");
    assert_eq!(ours.iter().collect::<Vec<_>>(), ms);
    let mut reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(&row.bytes), None)
            .expect("arrow-rs reads the stream");
    let batch = reader
        .next()
        .expect("one batch")
        .expect("arrow-rs decodes the batch");
    assert!(reader.next().is_none(), "one batch only");
    assert_eq!(batch.num_rows(), ms.len());
    let times = batch.column(0).as_primitive::<UInt64Type>();
    let dst = batch.column(1).as_fixed_size_binary();
    let rtt = batch.column(2).as_primitive::<UInt16Type>();
    for (i, m) in ms.iter().enumerate() {
        assert_eq!(times.value(i), m.event_time);
        assert_eq!(dst.value(i), ours.dst_bytes(i));
        let code = (!rtt.is_null(i)).then(|| RttCode(rtt.value(i)));
        assert_eq!(code, m.rtt, "measurement {i}");
    }
}
