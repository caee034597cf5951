//! The shell commands of a Markdown file, as the docs harness runs them: every fenced `sh` block,
//! its lines joined where a `\` continues one or a quote is still open, comments left out, with
//! the JSON a `# {...}` comment line right after a command shows as its output, and the block's
//! `<!-- not run: REASON -->` mark (the HTML comment on the line before its fence); and the
//! `` `curl ...` `` examples in a table's rows (docs/server.md's route tables).

/// One command of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    /// The line it starts on (from 1).
    pub(crate) line: usize,
    pub(crate) text: String,
    /// The JSON object the doc shows as its first output line (`# {...}` right after it).
    pub(crate) shown: Option<String>,
}

/// One `sh` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    /// The line of its opening fence (from 1).
    pub(crate) line: usize,
    /// Why it is not run here, where the doc says so.
    pub(crate) not_run: Option<String>,
    pub(crate) commands: Vec<Command>,
}

/// The mark a doc puts on the line before a block that cannot run on the test assets.
const NOT_RUN: &str = "<!-- not run:";

/// Every `sh` block of `markdown`.
pub(crate) fn blocks(markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_end();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let end = (i + 1..lines.len()).find(|&j| lines[j].trim_end() == "```").unwrap_or(lines.len());
        if fence == "```sh" {
            let not_run = i
                .checked_sub(1)
                .and_then(|p| lines[p].trim().strip_prefix(NOT_RUN))
                .map(|r| r.trim_end_matches("-->").trim().to_owned());
            out.push(Block { line: i + 1, not_run, commands: commands(&lines[i + 1..end], i + 2) });
        }
        i = end + 1;
    }
    out
}

/// Every `` `curl ...` `` code span in a table row (a line that starts with `|`) of `markdown`,
/// outside fences, as one command each.
pub(crate) fn table_curls(markdown: &str) -> Vec<Command> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (k, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence || !line.trim_start().starts_with('|') {
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            if span.starts_with("curl ") {
                out.push(Command { line: k + 1, text: span.to_owned(), shown: None });
            }
        }
    }
    out
}

/// The commands of a block's `lines`, the first of which is line `first` of the file.
fn commands(lines: &[&str], first: usize) -> Vec<Command> {
    let mut out: Vec<Command> = Vec::new();
    let mut pending: Option<Command> = None;
    for (k, raw) in lines.iter().enumerate() {
        if let Some(c) = pending.as_mut() {
            c.text.push('\n');
            c.text.push_str(raw);
        } else {
            let line = raw.trim();
            if let Some(comment) = line.strip_prefix('#') {
                let shown = comment.trim();
                // A `# {...}` right after a command is the output the doc shows for it.
                if shown.starts_with('{')
                    && let Some(last) = out.last_mut().filter(|c| c.shown.is_none())
                {
                    last.shown = Some(shown.to_owned());
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            pending = Some(Command { line: first + k, text: (*raw).to_owned(), shown: None });
        }
        let c = pending.as_ref().map(|c| c.text.clone()).unwrap_or_default();
        if !continues(&c) {
            out.extend(pending.take());
        }
    }
    out.extend(pending);
    out
}

/// Whether a command goes on to the next line: a trailing `\`, or a quote still open.
fn continues(text: &str) -> bool {
    if text.trim_end().ends_with('\\') {
        return true;
    }
    let (mut single, mut double) = (false, false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '\\' if !single => {
                chars.next();
            }
            '#' if !single && !double => {
                // A comment: the rest of this line is not the command's.
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    single || double
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_commands_marks_and_shown_output() {
        let doc = "intro\n```sh\n# a comment\nnornir vector embed \"x\"   # trailing\n# {\"embedding\": [...]}\ncurl -d '{\"a\": 1,\n  \"b\": 2}' \\\n  -H x\n```\n\n<!-- not run: needs an NVIDIA GPU -->\n```sh\nnornir vector doctor --expect cuda\n```\n```python\nprint(1)\n```\n";
        let b = blocks(doc);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].line, b[0].not_run.as_deref()), (2, None));
        assert_eq!(b[0].commands.len(), 2);
        assert_eq!(b[0].commands[0].line, 4);
        assert_eq!(b[0].commands[0].shown.as_deref(), Some("{\"embedding\": [...]}"));
        assert_eq!(b[0].commands[1].text, "curl -d '{\"a\": 1,\n  \"b\": 2}' \\\n  -H x");
        assert_eq!(b[1].not_run.as_deref(), Some("needs an NVIDIA GPU"));
        assert!(!continues("echo 'it''s'"), "quotes closed");
        assert!(continues("echo \"open"));
        assert!(!continues("nornir x # it's a comment"), "a quote in a comment opens nothing");
    }

    #[test]
    fn curls_in_table_rows_only() {
        let doc = "| route | example |\n| --- | --- |\n| `GET /health` | `curl -s localhost:8080/health` |\n\
                   text `curl -s localhost:8080/metrics`\n```sh\n| `curl -s x` |\n```\n";
        let c = table_curls(doc);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!((c[0].line, c[0].text.as_str()), (3, "curl -s localhost:8080/health"));
    }
}
