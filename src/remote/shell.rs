//! Shell lines for another machine: every remote command goes through `sh -c` with its
//! arguments single-quoted, so the remote login shell only ever parses `sh -c '...' ...`,
//! whatever shell it is.

/// Quotes `s` for a POSIX shell: single quotes, with each `'` written as `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// `sh -c 'SCRIPT' stairbench ARG...`, each part quoted: the script reads its arguments as
/// `$1`, `$2`, ... and never needs them spliced into its text.
pub fn sh_c(script: &str, args: &[&str]) -> String {
    let mut line = format!("sh -c {} stairbench", shell_quote(script));
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quote(arg));
    }
    line
}

/// `s` cut to at most `max_chars` characters.
pub fn truncate(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sh(line: &str) -> String {
        let out = Command::new("sh").arg("-c").arg(line).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn quoting_survives_a_shell() {
        let nasty = "it's \"quoted\" $HOME `x` \\ ; rm -rf /";
        assert_eq!(sh(&format!("printf %s {}", shell_quote(nasty))), nasty);
        let line = sh_c("printf '%s|%s' \"$1\" \"$2\"", &[nasty, "b c"]);
        assert_eq!(sh(&line), format!("{nasty}|b c"));
    }
}
