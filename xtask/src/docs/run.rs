//! Running one block's commands with bash in the prepared folder: `nornir` is the debug build
//! (first on PATH; `target/release/nornir` in a doc means it too), a `nornir vector serve` runs in
//! the background until its `/health` answers and stops at the next serve or the block's end (a
//! block that curls without one gets the default model's server), and each command's outcome is
//! judged as the module says.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::extract::{self, Block};

/// What the run did and what failed.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) commands: usize,
    pub(crate) blocks: usize,
    pub(crate) not_run: Vec<String>,
    pub(crate) failures: Vec<String>,
}

/// The longest one command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest a server may take to answer `/health` 200.
const SERVER_READY: Duration = Duration::from_secs(120);

/// Runs `block` of the doc `file`, adding to `tally`.
pub(crate) fn block(
    file: &str,
    block: &Block,
    work: &Path,
    bin: &Path,
    env: &[(&'static str, PathBuf)],
    tally: &mut Tally,
) {
    if let Some(reason) = &block.not_run {
        tally.not_run.push(format!("{file}:{}: {reason}", block.line));
        return;
    }
    tally.blocks += 1;
    let shell = |text: &str| shell(text, work, bin, env);
    let mut server: Option<Child> = None;
    let needs_server = block.commands.iter().any(|c| c.text.contains("curl ") && c.text.contains("localhost"));
    if needs_server && !block.commands.iter().any(|c| is_serve(&c.text)) {
        server = start_server(&mut shell("nornir vector serve --port 8080"), 8080)
            .map_err(|e| tally.failures.push(format!("{file}:{}: the server for its curls: {e}", block.line)))
            .ok();
    }
    for command in &block.commands {
        tally.commands += 1;
        let text = as_run(&command.text);
        let at = format!("{file}:{}: `{}`", command.line, text.replace('\n', " "));
        if is_serve(&text) {
            stop(server.take());
            match start_server(&mut shell(&text), port(&text)) {
                Ok(child) => server = Some(child),
                Err(e) => tally.failures.push(format!("{at}: {e}")),
            }
            continue;
        }
        if let Err(e) = judge(&mut shell(&text), &text, command) {
            tally.failures.push(format!("{at}: {e}"));
        }
    }
    stop(server);
}

/// A table's curls (docs/server.md's routes), each against a server of the models the docs name
/// (`minilm`, `splade`, `reranker`) whose first model is of the kind its route answers for, as
/// TEI's routes use the first model: the reranker for `/rerank` and `/predict`, the sparse
/// encoder for `/embed_sparse`, else the default model.
pub(crate) fn table_curls(
    file: &str,
    curls: &[extract::Command],
    work: &Path,
    bin: &Path,
    env: &[(&'static str, PathBuf)],
    tally: &mut Tally,
) {
    let mut serving: Option<(&str, Child)> = None;
    for command in curls {
        tally.commands += 1;
        let text = as_run(&command.text);
        let at = format!("{file}:{}: `{text}`", command.line);
        let first = first_model_for(&text);
        if serving.as_ref().map(|(f, _)| *f) != Some(first) {
            stop(serving.take().map(|(_, c)| c));
            let mut models = vec![first];
            models.extend(["minilm", "splade", "reranker"].into_iter().filter(|m| *m != first));
            let args: Vec<String> = models.iter().map(|m| format!("--model {m}={}", model_folder(m))).collect();
            match start_server(
                &mut shell(&format!("nornir vector serve --port 8080 {}", args.join(" ")), work, bin, env),
                8080,
            ) {
                Ok(child) => serving = Some((first, child)),
                Err(e) => {
                    tally.failures.push(format!("{at}: the server for it: {e}"));
                    continue;
                }
            }
        }
        if let Err(e) = judge(&mut shell(&text, work, bin, env), &text, command) {
            tally.failures.push(format!("{at}: {e}"));
        }
    }
    stop(serving.map(|(_, c)| c));
}

/// The served model a TEI route needs first.
fn first_model_for(curl: &str) -> &'static str {
    if curl.contains(":8080/rerank") || curl.contains(":8080/predict") {
        "reranker"
    } else if curl.contains(":8080/embed_sparse") {
        "splade"
    } else {
        "minilm"
    }
}

/// The prepared folder (workdir.rs) of a model the docs' tables name.
fn model_folder(name: &str) -> &'static str {
    match name {
        "splade" => "splade-onnx",
        "reranker" => "reranker",
        _ => "DIR",
    }
}

/// A bash command in the prepared folder with the built `nornir` first on PATH.
fn shell(text: &str, work: &Path, bin: &Path, env: &[(&'static str, PathBuf)]) -> Command {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut c = Command::new("bash");
    c.args(["-c", text]).current_dir(work).envs(env.iter().cloned()).env("PATH", &path);
    c
}

/// A doc's command as it is run: `target/release/nornir` is the build under test, the cache
/// `~/.cache/nornir` is the tests' `$NORNIR_HOME`, `HOST` is this machine, and a curl fails
/// (exit 22) on an HTTP error status.
fn as_run(text: &str) -> String {
    let text = text.replace("target/release/nornir", "nornir").replace("~/.cache/nornir", "$NORNIR_HOME");
    match text.strip_prefix("curl ") {
        Some(rest) => format!("curl --fail-with-body {}", rest.replace("HOST:", "localhost:")),
        None => text,
    }
}

/// Runs one command and says what is wrong with its outcome, if anything.
fn judge(cmd: &mut Command, text: &str, command: &extract::Command) -> Result<(), String> {
    let out = output_within(cmd, COMMAND_TIMEOUT)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail = |s: &str| s.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
    let want = promised_exit(text).unwrap_or(0);
    if out.status.code() != Some(want) {
        return Err(format!("exit {:?} where {want} was expected: {}", out.status.code(), tail(&stderr)));
    }
    if text.trim_start().starts_with("curl ") {
        if stdout.trim().is_empty() {
            return Err("the server answered nothing".to_owned());
        }
        let answer: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
        if answer.as_ref().is_some_and(|a| a.get("error").is_some()) {
            return Err(format!("the server answered an error: {}", stdout.trim()));
        }
    }
    if let Some(shown) = &command.shown {
        let first = stdout.lines().next().unwrap_or("");
        let got: Option<serde_json::Value> = serde_json::from_str(first).ok();
        let got_keys = got.as_ref().and_then(|v| v.as_object()).map(|o| {
            let mut k: Vec<String> = o.keys().cloned().collect();
            k.sort();
            k
        });
        let shown_keys = top_level_keys(shown);
        if got_keys.as_ref() != Some(&shown_keys) {
            return Err(format!("the doc shows an object with keys {shown_keys:?}; the first line has {got_keys:?}"));
        }
    }
    Ok(())
}

/// The exit code a command's comment promises (`# exit 2 naming ...`), if it does.
fn promised_exit(text: &str) -> Option<i32> {
    let comment = text.rsplit_once("# exit ")?.1;
    comment.split_whitespace().next()?.parse().ok()
}

/// The keys of the outermost object of a shown line such as `{"a": [...], "b": {"c": 1}}`, sorted.
pub(super) fn top_level_keys(shown: &str) -> Vec<String> {
    let (mut depth, mut keys, mut in_string, mut current) = (0usize, Vec::new(), false, String::new());
    let mut chars = shown.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, in_string) {
            ('"', false) => {
                in_string = true;
                current.clear();
            }
            ('"', true) => {
                in_string = false;
                let rest: String = chars.clone().take_while(|c| c.is_whitespace() || *c == ':').collect();
                if depth == 1 && rest.contains(':') {
                    keys.push(current.clone());
                }
            }
            (c, true) => current.push(c),
            ('{' | '[', false) => depth += 1,
            ('}' | ']', false) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

fn is_serve(text: &str) -> bool {
    text.contains("nornir vector serve")
}

/// The `--port` of a serve command (8080 when it gives none).
fn port(text: &str) -> u16 {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.windows(2).find(|w| w[0] == "--port").and_then(|w| w[1].parse().ok()).unwrap_or(8080)
}

/// Starts a server and waits for its `/health` 200; its error output is kept for a failure.
fn start_server(cmd: &mut Command, port: u16) -> Result<Child, String> {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    let started = Instant::now();
    while started.elapsed() < SERVER_READY {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(format!("the server exited ({status}): {}", err.trim()));
        }
        if health(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(Some(child));
    Err(format!("no /health 200 on port {port} within {} s", SERVER_READY.as_secs()))
}

/// Whether `GET /health` on `port` answers 200.
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// Stops a server with SIGTERM and waits for it (SIGKILL after 10 s). bash runs a lone command
/// by exec, so the child is the server itself. Never a negative pid: procps-ng 4.0.2's
/// `kill -TERM -PGID` calls kill(-1, SIGTERM), every process the user may signal (strace shows it).
fn stop(server: Option<Child>) {
    let Some(mut child) = server else { return };
    let _ = Command::new("kill").args(["-s", "TERM", &child.id().to_string()]).status();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A command's output, killed past `limit`.
fn output_within(cmd: &mut Command, limit: Duration) -> Result<std::process::Output, String> {
    let child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.map_err(|e| e.to_string()),
        Err(_) => {
            let _ = Command::new("kill").args(["-s", "KILL", &id.to_string()]).status();
            Err(format!("still running after {} s", limit.as_secs()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_keys_exits_and_ports() {
        assert_eq!(
            top_level_keys(r#"{"indices":[2103,2413],"values":[1.3,1.4],"tokens":["city","french"]}"#),
            ["indices", "tokens", "values"]
        );
        assert_eq!(top_level_keys(r#"{"embedding": [...], "chunks": [{"start","end"}]}"#), ["chunks", "embedding"]);
        assert_eq!(promised_exit("nornir vector embed --long refuse   # exit 2 naming the text"), Some(2));
        assert_eq!(promised_exit("nornir vector embed x"), None);
        assert_eq!(port("nornir vector serve --host 0.0.0.0 --port 9090 --model DIR"), 9090);
        assert_eq!(port("nornir vector serve"), 8080);
        assert_eq!(
            as_run("curl -s HOST:8080/embed -d '{}'"),
            "curl --fail-with-body -s localhost:8080/embed -d '{}'",
            "a curl fails on an HTTP error"
        );
        assert_eq!(
            as_run("target/release/nornir vector serve --model ~/.cache/nornir/models/m"),
            "nornir vector serve --model $NORNIR_HOME/models/m"
        );
        assert_eq!(first_model_for("curl -s localhost:8080/predict -d x"), "reranker");
        assert_eq!(first_model_for("curl -s localhost:8080/embed_sparse -d x"), "splade");
        assert_eq!(
            first_model_for("curl -s localhost:8080/v2/rerank -d x"),
            "minilm",
            "Cohere's route names its model"
        );
    }

    /// A doc whose command fails, exits otherwise than it promises, or prints other keys than it
    /// shows is a failure; one that does what it says passes.
    #[test]
    fn a_command_that_no_longer_does_what_the_doc_shows_fails() {
        let work = tempfile::tempdir().expect("tempdir");
        let run = |doc: &str| {
            let mut tally = Tally::default();
            for b in extract::blocks(doc) {
                block("doc.md", &b, work.path(), Path::new("/nonexistent"), &[], &mut tally);
            }
            tally
        };
        let ok =
            run("```sh\necho '{\"a\": 1, \"b\": 2}'\n# {\"a\": ..., \"b\": [...]}\nfalse   # exit 1 as said\n```\n");
        assert!(ok.failures.is_empty(), "{:?}", ok.failures);
        assert_eq!((ok.commands, ok.blocks), (2, 1));
        let bad = run("```sh\necho '{\"a\": 1}'\n# {\"a\": 1, \"b\": 2}\nfalse\n```\n");
        assert_eq!(bad.failures.len(), 2, "{:?}", bad.failures);
        assert!(bad.failures[0].contains("doc.md:2") && bad.failures[0].contains("keys"), "{:?}", bad.failures);
        assert!(bad.failures[1].contains("exit Some(1) where 0"), "{:?}", bad.failures);
        let skipped = run("<!-- not run: needs a GPU -->\n```sh\nfalse\n```\n");
        assert_eq!((skipped.failures.len(), skipped.not_run.len()), (0, 1));
    }
}
