//! A running `nornir vector serve` for the server tests: started for real on a free port with
//! an API key, driven over HTTP, stopped with SIGTERM when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::model;

pub const KEY: &str = "test-key-0123456789";

/// A running `nornir vector serve`, stopped with SIGTERM when dropped.
pub struct Server {
    pub child: Child,
    pub url: String,
    /// The gRPC address (`host:port`) when started with `--grpc-port`.
    pub grpc: Option<String>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Self {
        Self::start_with(&model(), extra)
    }

    pub fn start_with(model: &std::path::Path, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nornir"))
            .args(["vector", "serve", "--port", "0", "--device", "cpu", "--api-key", KEY, "--model"])
            .arg(model)
            .args(extra)
            .env_remove("NORNIR_DEVICE")
            .env_remove("ORT_DYLIB_PATH")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nornir vector serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = loop {
            let line = lines.next().expect("the server ended before listening").expect("read stderr");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("an address").to_owned();
            }
        };
        let grpc = extra.contains(&"--grpc-port").then(|| {
            loop {
                let line = lines.next().expect("the server ended before serving gRPC").expect("read stderr");
                if let Some(rest) = line.split("gRPC (tei.v1) on ").nth(1) {
                    break rest.trim().to_owned();
                }
            }
        });
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let server = Self { child, url, grpc };
        let started = Instant::now();
        while server.get("/health").0 != 200 {
            assert!(started.elapsed() < Duration::from_secs(120), "not ready after 2 minutes");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The status and body; no answer at all (a transport error) fails the test.
    pub fn request(&self, method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> (u16, String) {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
        let mut r = agent.request(method, &format!("{}{path}", self.url)).set("content-type", "application/json");
        if let Some(k) = key {
            r = r.set("authorization", &format!("Bearer {k}"));
        }
        let result = match body {
            Some(b) => r.send_string(b),
            None => r.call(),
        };
        let text = |resp: ureq::Response| {
            let mut body = String::new();
            std::io::Read::read_to_string(&mut resp.into_reader(), &mut body).expect("body");
            body
        };
        match result {
            Ok(resp) => (resp.status(), text(resp)),
            Err(ureq::Error::Status(code, resp)) => (code, text(resp)),
            Err(e) => panic!("{method} {path}: no answer: {e}"),
        }
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, Some(KEY), None)
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = self.request("POST", path, Some(KEY), Some(&body.to_string()));
        (
            status,
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{path} answered {status} with no JSON ({e}): {text}")),
        )
    }

    /// A counter or gauge of `/metrics` (0 when absent).
    pub fn metric(&self, name: &str) -> u64 {
        let (_, metrics) = self.get("/metrics");
        metric(&metrics, name)
    }

    pub fn rss_mib(&self) -> f64 {
        nornir_test_support::status_kib(Some(self.child.id()), "VmRSS:") as f64 / 1024.0
    }

    /// Sends SIGTERM, as Kubernetes does to stop a pod.
    pub fn sigterm(&self) {
        // SAFETY: kill(2) on our own child, which has not been waited for, so its pid is still ours.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0, "kill");
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.sigterm();
        self.child.wait().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
        }
    }
}

/// The value of metric `name` in a `/metrics` text, summed over its labels (0 when absent).
pub fn metric(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let rest = if rest.starts_with('{') { &rest[rest.find('}')? + 1..] } else { rest };
            rest.strip_prefix(' ')?.trim().parse::<u64>().ok()
        })
        .sum()
}

/// Runs scripts/client_libraries_check.py's `client` (in the clients' venv) against the server.
pub fn client(client: &str, server: &Server, model: &str, texts: &[&str]) -> Value {
    use std::io::Write;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/client_libraries_check.py");
    let mut child = std::process::Command::new(nornir_test_support::env_path("NORNIR_TEST_PYTHON"))
        .arg(script)
        .args([client, server.url.as_str(), KEY, model])
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the client");
    child.stdin.take().expect("stdin").write_all(serde_json::json!(texts).to_string().as_bytes()).expect("send texts");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{client}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{client}'s JSON: {e}"))
}
