//! The binary other hosts get: this one without its debug sections. The release build keeps
//! line tables for local backtraces (about 60 of its 64 MB); a host runs built-in servers,
//! client groups and observers, which read none of them, and perf there names functions from
//! the symbol table, which the copy keeps (`objcopy --strip-debug` removes only the DWARF
//! sections). The copy is made once per binary, in a cache named by the binary's identity.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::RemoteError;

/// The stripped copy of `bin` to send to hosts, made now unless the cache has it. When it
/// cannot be made (no `objcopy`), `bin` itself, with the reason.
pub fn for_hosts(bin: &Path) -> (PathBuf, Option<String>) {
    // Hosts are set up in parallel: one thread strips, the others then find its copy.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    match stripped_copy(bin, &cache_dir()) {
        Ok(p) => (p, None),
        Err(e) => (bin.to_path_buf(), Some(e.to_string())),
    }
}

/// Where the stripped copies are kept: one directory per user under the temporary directory.
fn cache_dir() -> PathBuf {
    // /proc/self belongs to this process's user.
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    std::env::temp_dir().join(format!("stairbench-stripped-{uid}"))
}

/// `bin` without its debug sections, in `cache`, named by what identifies this build of it
/// (device, inode, size and modification time): a rebuilt binary gets a new copy.
pub fn stripped_copy(bin: &Path, cache: &Path) -> Result<PathBuf, RemoteError> {
    let local = |what: String| move |error| RemoteError::Local { what, error };
    let meta = std::fs::metadata(bin).map_err(local(format!("reading {}", bin.display())))?;
    let name = format!(
        "stairbench-{:x}-{:x}-{}-{}.{}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    );
    let dest = cache.join(name);
    if dest.is_file() {
        return Ok(dest);
    }
    std::fs::create_dir_all(cache).map_err(local(format!("creating {}", cache.display())))?;
    // A name of this process's own, renamed at the end: a concurrent run never sees half a copy.
    let part = cache.join(format!(".part.{}", std::process::id()));
    let out = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(bin)
        .arg(&part)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| RemoteError::Spawn {
            program: "objcopy".into(),
            error,
        })?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&part);
        return Err(RemoteError::Local {
            what: format!("stripping {} with objcopy", bin.display()),
            error: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        });
    }
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755))
        .map_err(local(format!("making {} executable", part.display())))?;
    std::fs::rename(&part, &dest).map_err(local(format!("renaming {}", part.display())))?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy of a binary with line tables is smaller, runs, keeps its symbol table (what
    /// perf names functions by) and is made once.
    #[test]
    fn a_stripped_copy_keeps_symbols_and_is_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("prog.c");
        std::fs::write(&src, "int named_function(void) { return 7; }\nint main(void) { return named_function() - 7; }\n").unwrap();
        let bin = dir.path().join("prog");
        let cc = Command::new("cc")
            .args(["-g", "-O0", "-o"])
            .arg(&bin)
            .arg(&src)
            .status();
        assert!(
            cc.is_ok_and(|s| s.success()),
            "cc (gcc) builds the test program"
        );
        let cache = dir.path().join("cache");
        let copy = stripped_copy(&bin, &cache).unwrap();
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        assert!(
            size(&copy) < size(&bin),
            "{} vs {}",
            size(&copy),
            size(&bin)
        );
        assert!(Command::new(&copy).status().unwrap().success());
        let sections = |p: &Path| {
            let out = Command::new("objdump").arg("-h").arg(p).output().unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert!(sections(&bin).contains(".debug_line"));
        assert!(!sections(&copy).contains(".debug_"), "{}", sections(&copy));
        let nm = Command::new("nm").arg(&copy).output().unwrap();
        assert!(String::from_utf8_lossy(&nm.stdout).contains(" T named_function"));
        // Made once: the cached copy is the same file.
        let again = stripped_copy(&bin, &cache).unwrap();
        assert_eq!(again, copy);
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
    }
}
