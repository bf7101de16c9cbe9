"""RIPE Atlas ping results for the tests and benchmarks: sagan's own fixture lines, a
generated corpus across firmware versions, dump files as RIPE writes them (multistream
bzip2), and the oracle: the packets RIPE's parser (``ripe.atlas.sagan``, a test
dependency, GPL-3.0, never vendored) gives, under the rules docs/job.md states.

The oracle reads each line with sagan and applies only what sagan leaves to its user:
which packets to keep (duplicates, error entries dropped; timeouts kept as failed pings),
the RTT at full precision (sagan rounds to 3 decimals: the entry's own value is taken
for a reply sagan read), the source (``from`` when global and of the result's family,
else a global packet source, else none), and the job's plausibility limits.
"""

from __future__ import annotations

import bz2
import ipaddress
import json
import random
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from ripe.atlas.sagan import Result

from support.run import ROOT

SAGAN_VERSION = "2.0.1"
#: Where sagan's source distribution (its tests hold real results) is kept once fetched.
SAGAN_SDIST_DIR = ROOT / ".venv" / "sagan-sdist"

#: The documented local scopes (docs/job.md, "Sources that name no probe").
LOCAL = [ipaddress.ip_network(n) for n in [
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
    "127.0.0.0/8", "0.0.0.0/32", "fe80::/10", "fc00::/7", "::1/128", "::/128",
]]


def sagan_fixture_lines() -> list[str]:
    """Every result line of sagan's own ping tests (tests/test_ping.py of its sdist,
    fetched from the package registry once)."""
    SAGAN_SDIST_DIR.mkdir(parents=True, exist_ok=True)
    sdist = SAGAN_SDIST_DIR / f"ripe_atlas_sagan-{SAGAN_VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"ripe-atlas-sagan=={SAGAN_VERSION}", "-d", str(SAGAN_SDIST_DIR)],
            check=True,
        )
    with tarfile.open(sdist) as t:
        member = t.extractfile(f"ripe_atlas_sagan-{SAGAN_VERSION}/tests/test_ping.py")
        text = member.read().decode()
    lines = re.findall(r"Result\.get\('(\{.*?\})'\)", text)
    assert len(lines) >= 15, f"{len(lines)} fixture lines in sagan's tests"
    return lines


def parse_ip(text):
    try:
        a = ipaddress.ip_address(str(text).strip())
    except ValueError:
        return None
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped:
        return a.ipv4_mapped
    return a


def is_global(text) -> bool:
    a = parse_ip(text) if text is not None else None
    if a is None or a.is_multicast or (a.version == 4 and int(a) == 0xFFFFFFFF):
        return False
    return not any(a in n for n in LOCAL if n.version == a.version)


def rtt_code(ms: float) -> int:
    import math
    value = max(1.0, ms * 1000.0)
    e = 0
    while value >= 2048 and e < 31:
        value /= 2
        e += 1
    return (e << 11) | min(math.floor(value), 2047)


def oracle_packets(lines, source="public", earliest=946_684_800, latest=None, max_rtt=60_000.0):
    """The packets the job keeps, by sagan and the rules: (src, time, dst, rtt code or
    None for a failed ping), sources and destinations canonical."""
    import time as _time
    latest = latest if latest is not None else int(_time.time()) + 86_400
    out = []
    for line in lines:
        try:
            r = Result.get(line, on_error=Result.ACTION_IGNORE, on_malformation=Result.ACTION_IGNORE)
        except Exception:  # sagan refuses the line (or fails on it): no packets
            continue
        if r.type != "ping":
            continue
        raw = r.raw_data
        entries = raw.get("result")
        if not isinstance(entries, list):
            continue
        af, dst, ts = r.af, r.destination_address, r.created_timestamp
        origin = r.origin
        from_ok = origin is not None and is_global(origin) and (
            af is None or parse_ip(origin).version == af)
        for p, entry in zip(r.packets, entries):
            if p.dup:
                continue
            if "rtt" in entry:
                rtt = float(entry["rtt"])  # full precision, not sagan's rounding
                if rtt < 0:
                    continue
            elif "error" in entry:
                continue
            elif "x" in entry:
                rtt = -1.0
            else:
                continue
            src = p.source_address
            if source == "public":
                src = origin if from_ok else (src if is_global(src) else None)
                if src is None:
                    continue
            s, d = parse_ip(src) if src is not None else None, parse_ip(dst) if dst is not None else None
            if s is None or d is None or af not in (4, 6) or s.version != af or d.version != af:
                continue
            if not earliest <= ts <= latest or rtt != rtt or rtt in (float("inf"),) or rtt > max_rtt:
                continue
            out.append((str(s), ts, str(d), None if rtt < 0 else rtt_code(rtt)))
    return out


def _public_v4(rng):
    while True:
        a = ipaddress.IPv4Address(rng.getrandbits(32))
        if is_global(str(a)) and not a.is_reserved:
            return str(a)


def _public_v6(rng):
    return str(ipaddress.IPv6Address((0x2A00 << 112) | rng.getrandbits(100)))


def _private(rng, af):
    if af == 6:
        return str(ipaddress.IPv6Address((0xFD00 << 112) | rng.getrandbits(64)))
    return rng.choice([f"192.168.1.{rng.randrange(1, 255)}", f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}"])


def generated_results(n: int, seed: int = 7, probes: int = 60) -> list[str]:
    """`n` lines across firmware versions: string numbers, `srcaddr`/`addr`/`pf`, dups
    and late replies, errors, results without `result`, IPv6, missing `af`, RTTs above
    60 s and of 0 ms, private and public sources, a traceroute, a malformed line."""
    rng = random.Random(seed)
    probe = []
    for i in range(probes):
        af = 6 if rng.random() < 0.42 else 4
        pub = _public_v6(rng) if af == 6 else _public_v4(rng)
        probe.append((1000 + i, af, pub, _private(rng, af)))
    dsts = {4: [_public_v4(rng) for _ in range(20)], 6: [_public_v6(rng) for _ in range(20)]}
    lines = []
    for k in range(n):
        prb, af, pub, priv = rng.choice(probe)
        fw = rng.choice([1, 4400, 4460, 4610, 4790, 5080, 5080])
        ts = 1_600_000_000 + k * 17 + rng.randrange(10)
        dst = rng.choice(dsts[af])
        r = {"type": "ping", "msm_id": 1001 + k % 3, "prb_id": prb, "timestamp": ts, "fw": fw,
             "step": rng.choice([240, None]), "dup": 0, "sent": 3, "rcvd": 3, "avg": 10.0,
             "size": 48}  # sagan fails on a 4460–4569 ICMP result without `size`
        roll = rng.random()
        r["from"] = (pub if roll < 0.85 else _private(rng, af) if roll < 0.92
                     else (_public_v4(rng) if af == 6 else _public_v6(rng)) if roll < 0.96 else None)
        if r["from"] is None:
            del r["from"]
        src = priv if rng.random() < 0.8 else pub
        if fw < 4460:
            r.update(addr=dst, srcaddr=src, pf=str(af) if rng.random() < 0.5 else af, name="x.example")
            if rng.random() < 0.5:
                r["fw"] = str(fw)
        else:
            r.update(dst_addr=dst, src_addr=src, dst_name="x.example", proto="ICMP")
            if rng.random() < 0.9:
                r["af"] = af
        if fw == 1:
            lines.append(json.dumps(r))  # firmware 1: no packets
            continue
        entries = []
        for _ in range(rng.randrange(1, 6)):
            e = rng.random()
            rtt = rng.lognormvariate(3.5, 1.0)
            if e < 0.62:
                v = round(rtt, 9) if rng.random() < 0.8 else str(round(rtt, 6))
                entries.append({"rtt": v, "ttl": 50})
            elif e < 0.75:
                entries.append({"x": "*"} if rng.random() < 0.5 else {"x": "*", "srcaddr": src})
            elif e < 0.82:
                entries.append({"dup": 1, "rtt": round(rtt * 3, 6)})
            elif e < 0.88:
                entries.append({"error": rng.choice(["sendto failed: Network is unreachable", "Timeout"])})
            elif e < 0.92:
                entries.append({"rtt": rng.choice([0, 0.0, 61_234.5, 120_000.25])})
            else:
                entries.append({"rtt": round(rtt, 3)})
        r["result"] = entries
        lines.append(json.dumps(r))
    # Lines that are no pings, or no results at all.
    lines.append(json.dumps({"type": "traceroute", "fw": 5080, "timestamp": 1_600_000_001,
                             "msm_id": 5001, "prb_id": 1000, "result": [{"hop": 1}]}))
    lines.append('{"type": "ping", "fw": 5080, "timestamp": 1600000002, "msm_id": 1, ')
    lines.append(json.dumps({"type": "ping", "fw": 5080, "timestamp": 1_600_000_003, "msm_id": 1,
                             "prb_id": 1000, "dnserr": "non-recoverable failure in name resolution",
                             "from": probe[0][2], "result": [{"error": "dns resolution failed"}]}))
    return lines


def write_dump(path: Path, lines: list[str], streams: int = 3, torn_last_line: bool = False) -> Path:
    """`lines` as RIPE's dumps are written: JSON lines, bzip2 in `streams` streams back
    to back (cut mid-line, as a parallel compressor cuts); `torn_last_line`: the file
    ends inside a last, unfinished line."""
    text = "".join(line + "\n" for line in lines).encode()
    if torn_last_line:
        text += b'{"type": "ping", "fw": 5080, "timest'
    cut = [len(text) * i // streams for i in range(streams + 1)]
    with open(path, "wb") as f:
        for a, b in zip(cut, cut[1:]):
            f.write(bz2.compress(text[a:b], 9))
    return path
