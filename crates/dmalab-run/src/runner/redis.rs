//! The redis recipe: a private redis-server on a free loopback port
//! (persistence off), timed redis-benchmark against it, requests per second
//! per test from its CSV.

use super::evidence::Window;
use super::spawn::{killpg, spawn};
use super::victim::{fail, lookup_number, outcome, Timed, VictimOutcome};
use crate::experiment::RedisRecipe;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn redis_ping(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}

/// redis-server on 127.0.0.1:`port`, in the foreground, nothing saved.
fn server_argv(port: u16, dir: &Path) -> Vec<String> {
    [
        "redis-server",
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
        "--dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// redis-benchmark of the recipe against 127.0.0.1:`port`, CSV output.
fn bench_argv(r: &RedisRecipe, port: u16) -> Vec<String> {
    vec![
        "redis-benchmark".into(),
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-n".into(),
        r.requests.to_string(),
        "-c".into(),
        r.clients.to_string(),
        "-t".into(),
        r.tests.clone(),
        "-d".into(),
        r.data_size_bytes.to_string(),
        "-P".into(),
        r.pipeline.to_string(),
        "-r".into(),
        r.keyspace.to_string(),
        "--csv".into(),
    ]
}

/// Requests per second by test from redis-benchmark's `--csv` output
/// (`"test","rps",...` lines; the header and anything else are skipped).
fn requests_per_s(out: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut rps = serde_json::Map::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split(',').map(|x| x.trim_matches('"')).collect();
        if f.len() >= 2 {
            if let Ok(x) = f[1].parse::<f64>() {
                rps.insert(f[0].to_string(), serde_json::json!(x));
            }
        }
    }
    rps
}

/// Runs the redis recipe once: the server untimed, the benchmark timed.
pub(super) fn redis_victim(t: &Timed, r: &RedisRecipe, w: &mut Window) -> VictimOutcome {
    let (v, dir) = (t.v, t.dir);
    let port = match free_port() {
        Ok(p) => p,
        Err(e) => {
            return fail(
                format!("redis: no free port on 127.0.0.1: {e}"),
                None,
                Path::new(""),
                vec![],
            )
        }
    };
    let server = server_argv(port, dir);
    let mut srv = match spawn(&server, t.cpus, dir, "redis-server") {
        Ok(s) => s,
        Err(e) => {
            return fail(
                format!(
                "redis-server could not start: {e}; install it with `apt-get install redis-server`"
            ),
                None,
                Path::new(""),
                server,
            )
        }
    };
    let t0 = Instant::now();
    while !redis_ping(port) {
        if t0.elapsed() > Duration::from_secs(20) || matches!(srv.child.try_wait(), Ok(Some(_))) {
            killpg(srv.pid, libc::SIGKILL);
            let st = srv.child.wait().ok();
            return fail(
                "redis-server did not answer PING on 127.0.0.1 within 20 s".into(),
                st,
                &srv.stderr,
                server,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let bench = bench_argv(r, port);
    let res = t.run(&bench, w, "redis-benchmark");
    killpg(srv.pid, libc::SIGTERM);
    let _ = srv.child.wait();
    let s = match res {
        Err(o) => return *o,
        Ok(s) => s,
    };
    let wall_s = w.wall_ns() as f64 / 1e9;
    let out = std::fs::read_to_string(&s.stdout).unwrap_or_default();
    let rps = requests_per_s(&out);
    let result = serde_json::json!({ "wall_s": wall_s, "requests_per_s": rps });
    let value = if v.metric == "wall_s" {
        Ok(wall_s)
    } else {
        lookup_number(&serde_json::json!({"result": result}), &v.metric)
    };
    outcome(value, Some(result), bench)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_per_s_reads_the_csv_rows() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"81234.57\",\"0.3\"\n\"GET\",\"90000.00\",\"0.2\"\n\nnoise\n";
        let rps = requests_per_s(out);
        assert_eq!(rps.len(), 2, "{rps:?}");
        assert_eq!(rps["SET"], serde_json::json!(81234.57));
        assert_eq!(rps["GET"], serde_json::json!(90000.0));
    }

    #[test]
    fn server_saves_nothing_and_listens_on_loopback() {
        let a = server_argv(6400, Path::new("/d"));
        let after = |k: &str| a[a.iter().position(|x| x == k).unwrap() + 1].clone();
        assert_eq!(after("--port"), "6400");
        assert_eq!(after("--bind"), "127.0.0.1");
        assert_eq!(after("--save"), "");
        assert_eq!(after("--appendonly"), "no");
        assert_eq!(after("--dir"), "/d");
    }
}
