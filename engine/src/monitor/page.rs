//! The status page (`/` on the coordinator): server-rendered HTML with inline SVG and
//! no script, from the same [`Status`] as `/api/v1/status`. A live page refreshes
//! itself every [`REFRESH_SECONDS`].

use std::fmt::Write as _;

use super::model::{Ended, Source, Status};
use super::Outcome;

pub const REFRESH_SECONDS: u32 = 2;

/// Text made safe inside HTML elements and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Seconds as `1h 02m 03s`, `2m 03s`, `3.2s`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "–".into();
    }
    let s = seconds.round() as u64;
    match s {
        _ if seconds < 60.0 => format!("{seconds:.1}s"),
        _ if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m {:02}s", s / 3600, s % 3600 / 60, s % 60),
    }
}

fn opt_duration(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "–".into(), duration)
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}\
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}\
.state{font-weight:bold;padding:2px 8px;border-radius:4px;color:#fff}\
.running{background:#2a6fdb}.succeeded{background:#1f8a3b}.failed{background:#c0392b}.stopped{background:#b9770e}.planning{background:#777}\
.bar{background:#eee;width:160px;height:10px;display:inline-block}.bar i{background:#2a6fdb;height:10px;display:block}\
.warn{color:#c0392b}h2{margin-top:1.2em;font-size:16px}";

/// The page of `status`; `live`: refreshing itself (the coordinator's), or a report
/// rendered after the job (`coordinator status --html`).
pub fn render(status: &Status, live: bool) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>probeflow {} — {}</title>",
        escape(&status.kind),
        status.state.as_str()
    );
    if live && !status.state.is_over() {
        let _ = write!(
            h,
            "<meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">"
        );
    }
    let _ = write!(h, "<style>{STYLE}</style></head><body>");
    header(&mut h, status);
    stages(&mut h, status);
    rejected(&mut h, status);
    stragglers(&mut h, status);
    workers(&mut h, status);
    problems(&mut h, status);
    timeline(&mut h, status);
    events(&mut h, status);
    h.push_str("</body></html>\n");
    h
}

fn header(h: &mut String, s: &Status) {
    let _ = write!(
        h,
        "<h1>probeflow {} <span class=\"state {st}\" id=\"job-state\">{st}</span></h1>\
         <p>output <code>{}</code> · release {} · coordinator epoch {} · elapsed {}",
        escape(&s.kind),
        escape(&s.output),
        escape(&s.release),
        s.epoch,
        duration(s.elapsed_seconds),
        st = s.state.as_str(),
    );
    if let (Some(eta), Some(p90)) = (s.eta_seconds, s.eta_p90_seconds) {
        let _ = write!(h, " · ETA {} – {} (p90)", duration(eta), duration(p90));
    }
    h.push_str("</p>");
    if s.source != Source::Coordinator {
        let _ = write!(
            h,
            "<p id=\"source\">{} (rendered after the fact: ages are as of the last event)</p>",
            s.source.describe()
        );
    }
    if let Some(e) = &s.error {
        let _ = write!(h, "<p class=\"warn\" id=\"job-error\">{}</p>", escape(e));
    }
    if !s.missing.is_empty() {
        h.push_str("<ul class=\"warn\" id=\"missing\">");
        for m in &s.missing {
            let _ = write!(h, "<li>{}</li>", escape(m));
        }
        h.push_str("</ul>");
    }
}

fn stages(h: &mut String, s: &Status) {
    h.push_str(
        "<h2>Stages</h2><table id=\"stages\"><tr><th>stage</th><th>tasks</th><th>pending</th><th>leased</th>\
         <th>done</th><th>failed</th><th>retried</th><th>work</th><th></th><th>rate (recent / overall)</th>\
         <th>task p50 / p90 / max</th></tr>",
    );
    for st in &s.stages {
        let share = if st.units_planned > 0 {
            st.units_done as f64 / st.units_planned as f64
        } else if st.tasks > 0 {
            st.done as f64 / st.tasks as f64
        } else {
            0.0
        };
        let _ = write!(
            h,
            "<tr class=\"stage\" data-stage=\"{name}\"><td>{name}</td><td class=num>{}</td><td class=num>{}</td>\
             <td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td>\
             <td class=num>{} / {} {}</td><td><span class=bar><i style=\"width:{:.1}%\"></i></span></td>\
             <td class=num>{:.0} / {:.0} {unit}/s</td><td class=num>{} / {} / {}</td></tr>",
            st.tasks,
            st.pending,
            st.leased,
            st.done,
            st.failed + st.refused + st.lost,
            st.retried,
            st.units_done,
            st.units_planned,
            escape(&st.unit),
            share * 100.0,
            st.rate_recent,
            st.rate_overall,
            opt_duration(st.duration_p50),
            opt_duration(st.duration_p90),
            opt_duration(st.duration_max),
            name = escape(&st.name),
            unit = escape(&st.unit),
        );
    }
    h.push_str("</table>");
}

fn rejected(h: &mut String, s: &Status) {
    if s.rejected.is_empty() {
        return;
    }
    h.push_str("<p id=\"rejected\">rejected input records:");
    for (reason, n) in &s.rejected {
        let _ = write!(h, " <code>{}</code> {n}", escape(reason));
    }
    h.push_str("</p>");
}

fn stragglers(h: &mut String, s: &Status) {
    h.push_str("<h2>Stragglers</h2>");
    if s.stragglers.is_empty() {
        h.push_str("<p id=\"stragglers\">none</p>");
        return;
    }
    h.push_str("<table id=\"stragglers\"><tr><th>task</th><th>attempt</th><th>worker</th><th>running</th><th>stage median</th></tr>");
    for x in &s.stragglers {
        let _ = write!(
            h,
            "<tr class=\"straggler\"><td>{}</td><td class=num>{}</td><td>{}</td><td class=num>{}</td><td class=num>{}</td></tr>",
            escape(&x.task),
            x.attempt,
            escape(&x.worker),
            duration(x.running_seconds),
            duration(x.stage_median_seconds)
        );
    }
    h.push_str("</table>");
}

fn workers(h: &mut String, s: &Status) {
    h.push_str(
        "<h2>Workers</h2><table id=\"workers\"><tr><th>worker</th><th>state</th><th>leases (age)</th>\
         <th>last heard</th><th>memory</th><th>accepted</th><th>failed</th><th>last error</th></tr>",
    );
    for w in &s.workers {
        let leases: Vec<String> = w
            .leases
            .iter()
            .map(|l| format!("{} ({})", escape(&l.task), duration(l.age_seconds)))
            .collect();
        let _ = write!(
            h,
            "<tr class=\"worker\" data-worker=\"{name}\"><td>{name}</td><td>{}</td><td>{}</td><td class=num>{} ago</td>\
             <td class=num>{}</td><td class=num>{}</td><td class=num>{}</td><td>{}</td></tr>",
            w.state.as_str(),
            leases.join(", "),
            duration(w.heartbeat_age_seconds),
            crate::units::format_bytes(w.memory_bytes),
            w.accepted,
            w.failed,
            escape(w.last_error.as_deref().unwrap_or("")),
            name = escape(&w.name),
        );
    }
    h.push_str("</table>");
}

fn problems(h: &mut String, s: &Status) {
    h.push_str("<h2>Failed, refused and lost attempts</h2>");
    if s.problems.is_empty() {
        h.push_str("<p id=\"problems\">none</p>");
        return;
    }
    h.push_str("<table id=\"problems\"><tr><th>task</th><th>attempt</th><th>worker</th><th>outcome</th><th>reason</th></tr>");
    for p in &s.problems {
        let _ = write!(
            h,
            "<tr class=\"problem\"><td>{}</td><td class=num>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&p.task),
            p.attempt,
            escape(&p.worker),
            p.outcome.as_str(),
            escape(p.reason.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table>");
}

fn colour(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Accepted => "#2a6fdb",
        Outcome::Failed => "#c0392b",
        Outcome::Refused => "#8e44ad",
        Outcome::Lost => "#b9770e",
    }
}

/// One row per worker, one bar per attempt (running ones in grey), the job's start at
/// the left edge and now (or its end) at the right.
fn timeline(h: &mut String, s: &Status) {
    h.push_str("<h2>Timeline</h2>");
    let bars: Vec<(&Ended, bool)> = s
        .timeline
        .iter()
        .map(|e| (e, false))
        .chain(s.running.iter().map(|e| (e, true)))
        .collect();
    let mut rows: Vec<&str> = s.workers.iter().map(|w| w.name.as_str()).collect();
    for (e, _) in &bars {
        if !rows.contains(&e.worker.as_str()) {
            rows.push(&e.worker);
        }
    }
    let start = s.started;
    let end = s
        .ended
        .unwrap_or(s.started + s.elapsed_seconds)
        .max(start + 1e-3);
    let (width, label, row) = (900.0, 140.0, 18.0);
    let x = |t: f64| label + (t - start).max(0.0) / (end - start) * (width - label);
    let height = row * rows.len().max(1) as f64 + 20.0;
    let _ = write!(
        h,
        "<svg id=\"timeline\" width=\"{width}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\" font-size=\"11\">"
    );
    for (i, w) in rows.iter().enumerate() {
        let _ = write!(
            h,
            "<text x=\"0\" y=\"{:.1}\">{}</text>",
            row * i as f64 + 13.0,
            escape(w)
        );
    }
    for (e, running) in &bars {
        let Some(i) = rows.iter().position(|w| *w == e.worker) else {
            continue;
        };
        let x0 = x(e.started.unwrap_or(e.ended));
        let x1 = x(e.ended).max(x0 + 1.0);
        let fill = if *running { "#aaa" } else { colour(e.outcome) };
        let what = if *running {
            "running"
        } else {
            e.outcome.as_str()
        };
        let _ = write!(
            h,
            "<rect class=\"attempt\" data-task=\"{task}\" data-attempt=\"{}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" stroke=\"#fff\" stroke-width=\"0.5\"><title>{task} attempt {} on {}: {what} {}</title></rect>",
            e.attempt,
            row * i as f64 + 3.0,
            x1 - x0,
            row - 6.0,
            e.attempt,
            escape(&e.worker),
            escape(e.reason.as_deref().unwrap_or("")),
            task = escape(&e.task),
        );
    }
    for ev in s.events.iter().filter(|e| e.worker.is_none()) {
        if !ev.what.starts_with("coordinator epoch") {
            continue;
        }
        let _ = write!(
            h,
            "<line class=\"restart\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"0\" y2=\"{:.1}\" stroke=\"#c0392b\" stroke-dasharray=\"4 2\"><title>{}</title></line>",
            height - 20.0,
            escape(&ev.what),
            x = x(ev.at),
        );
    }
    for ev in &s.events {
        let Some(w) = &ev.worker else { continue };
        let Some(i) = rows.iter().position(|r| r == w) else {
            continue;
        };
        let _ = write!(
            h,
            "<line class=\"event\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#000\"><title>{}</title></line>",
            row * i as f64,
            row * (i + 1) as f64,
            escape(&ev.what),
            x = x(ev.at),
        );
    }
    let _ = write!(
        h,
        "<text x=\"{label}\" y=\"{:.1}\">start</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">+{}</text></svg>",
        height - 4.0,
        width,
        height - 4.0,
        duration(end - start)
    );
}

fn events(h: &mut String, s: &Status) {
    h.push_str(
        "<h2>Events</h2><table id=\"events\"><tr><th>when</th><th>worker</th><th>what</th></tr>",
    );
    for e in &s.events {
        let _ = write!(
            h,
            "<tr><td class=num>+{}</td><td>{}</td><td>{}</td></tr>",
            duration(e.at - s.started),
            escape(e.worker.as_deref().unwrap_or("")),
            escape(&e.what)
        );
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::{JobMonitor, JobState, Observation};
    use crate::protocol::TaskId;
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_page_shows_stages_workers_one_bar_per_attempt_and_escapes_what_it_shows() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut m = JobMonitor::new("probe_rows", "out/<x>", t0);
        m.observe(
            Observation::State {
                state: JobState::Running,
                error: None,
            },
            t0,
        );
        m.observe(
            Observation::WorkerJoined {
                worker: "w<1>".into(),
                memory_bytes: 1 << 30,
                capacity: 1,
            },
            t0,
        );
        let t = TaskId::new("map", 0);
        m.observe(
            Observation::StagePlanned {
                stage: t.stage,
                unit: "input_rows".into(),
                tasks: vec![(t, 10)],
            },
            t0,
        );
        for (attempt, outcome) in [(1, Outcome::Failed), (2, Outcome::Accepted)] {
            m.observe(
                Observation::AttemptStarted {
                    task: t,
                    attempt,
                    worker: "w<1>".into(),
                },
                t0,
            );
            m.observe(
                Observation::AttemptEnded {
                    task: t,
                    attempt,
                    worker: "w<1>".into(),
                    outcome,
                    reason: Some("disk <full>".into()),
                },
                t0 + Duration::from_secs(u64::from(attempt)),
            );
        }
        let page = render(&m.status(t0 + Duration::from_secs(3)), true);
        assert!(page.contains("http-equiv=\"refresh\""));
        assert_eq!(page.matches("class=\"stage\"").count(), 1);
        assert_eq!(page.matches("class=\"worker\"").count(), 1);
        assert_eq!(page.matches("class=\"attempt\"").count(), 2);
        assert!(page.contains("w&lt;1&gt;") && !page.contains("w<1>"));
        assert!(page.contains("disk &lt;full&gt;") && page.contains("out/&lt;x&gt;"));
        assert!(page.contains("10 / 10 input_rows"));
    }

    #[test]
    fn durations_read_as_a_person_would_write_them() {
        assert_eq!(duration(3.25), "3.2s");
        assert_eq!(duration(125.0), "2m 05s");
        assert_eq!(duration(3723.0), "1h 02m 03s");
        assert_eq!(duration(f64::NAN), "–");
    }
}
