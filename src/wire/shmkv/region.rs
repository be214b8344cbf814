//! The shared-memory region: a POSIX shm object in /dev/shm, mode 0600, with a header that
//! says what it holds. The server creates it (replacing one left by a crashed server) and
//! unlinks it on exit; clients attach and check the header before touching anything else.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use nix::fcntl::OFlag;
use nix::sys::mman::{mmap, munmap, shm_open, shm_unlink, MapFlags, ProtFlags};
use nix::sys::stat::Mode;

use super::sync::pid_alive;
use super::{Arch, ShmkvError};

/// "SBSHMKV1" read as a little-endian u64: the first eight bytes of every region.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SBSHMKV1");
/// Bumped whenever the layout of the region changes.
pub const LAYOUT_VERSION: u32 = 1;
/// The header's share of the region; the body starts here (page aligned).
pub const HEADER_BYTES: usize = 4096;

/// The region's header: written once by the server before `magic`, then only read (except
/// the few atomics documented below), so clients read it without synchronisation.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`], stored last with release order: a region without it is not ready.
    pub magic: AtomicU64,
    pub version: u32,
    /// 1 = single, 2 = per-worker.
    pub arch: u32,
    pub num_workers: u32,
    /// Bytes of one worker's block (per-worker) or of the channel (single).
    pub block_size: u32,
    pub total_size: u64,
    /// The serving process; a region whose server is gone is stale.
    pub server_pid: AtomicI32,
    /// Set when the server stops: waiting clients give up at once.
    pub stopping: AtomicU32,
    /// Round-robin counter for choosing a worker on attach.
    pub next_block: AtomicU32,
}

/// A mapped region. The creator unlinks it when dropped.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    /// The /dev/shm path, for messages.
    pub path: String,
    shm_name: String,
    /// Created by us and not yet unlinked.
    owner: std::sync::atomic::AtomicBool,
}

// SAFETY: the mapping is plain shared memory; every shared field is atomic or guarded by
// the protocols of the two designs.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

/// The shm object name of a server name ("/stairbench.shmkv.NAME").
fn shm_name(name: &str) -> Result<String, ShmkvError> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(ShmkvError::BadName(name.to_string()));
    }
    Ok(format!("/stairbench.shmkv.{name}"))
}

/// The file a region of `name` lives in.
pub fn path_of(name: &str) -> Result<String, ShmkvError> {
    Ok(format!("/dev/shm{}", shm_name(name)?))
}

impl Region {
    /// Creates the region of `name` with `body` bytes after the header, zero-filled. An
    /// existing region whose server is dead is replaced; a live or foreign one is refused.
    pub fn create(name: &str, body: usize) -> Result<Region, ShmkvError> {
        let shm = shm_name(name)?;
        let path = path_of(name)?;
        let len = HEADER_BYTES + body;
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
        let mode = Mode::from_bits_truncate(0o600);
        let fd = match shm_open(shm.as_str(), flags, mode) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::EEXIST) => {
                check_replaceable(&shm, &path)?;
                let _ = shm_unlink(shm.as_str());
                shm_open(shm.as_str(), flags, mode).map_err(|e| io(&path, "creating", e))?
            }
            Err(e) => return Err(io(&path, "creating", e)),
        };
        // The umask may have narrowed 0600 further; it can never have widened it.
        let _ = nix::sys::stat::fchmod(fd.as_raw_fd(), mode);
        let region = (|| {
            nix::unistd::ftruncate(&fd, len as i64).map_err(|e| io(&path, "sizing", e))?;
            map(&fd, len, &path)
        })();
        let ptr = match region {
            Ok(p) => p,
            Err(e) => {
                let _ = shm_unlink(shm.as_str());
                return Err(e);
            }
        };
        Ok(Region {
            ptr,
            len,
            path,
            shm_name: shm,
            owner: true.into(),
        })
    }

    /// Attaches to the region of `name` and checks its header. The arch is read from it.
    pub fn attach(name: &str) -> Result<(Region, Arch), ShmkvError> {
        let shm = shm_name(name)?;
        let path = path_of(name)?;
        let fd = shm_open(shm.as_str(), OFlag::O_RDWR, Mode::empty()).map_err(|e| match e {
            nix::errno::Errno::ENOENT => ShmkvError::NotFound {
                path: path.clone(),
                name: name.to_string(),
            },
            e => io(&path, "opening", e),
        })?;
        let len = nix::sys::stat::fstat(fd.as_raw_fd())
            .map_err(|e| io(&path, "inspecting", e))?
            .st_size as usize;
        if len < HEADER_BYTES {
            return Err(ShmkvError::Foreign {
                path,
                why: format!("it is {len} bytes, smaller than a header ({HEADER_BYTES})"),
            });
        }
        let ptr = map(&fd, len, &path)?;
        let region = Region {
            ptr,
            len,
            path,
            shm_name: shm,
            owner: false.into(),
        };
        let arch = region.check_mapped_header()?;
        Ok((region, arch))
    }

    /// The header.
    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long and page aligned.
        unsafe { &*(self.ptr as *const Header) }
    }

    /// The body, viewed as a `T` at `offset` bytes after the header.
    ///
    /// # Safety
    /// `T` must be valid for any bit pattern the region can hold (atomics, integers, byte
    /// arrays, or primitives initialised by the creator), and fit.
    pub unsafe fn body<T>(&self, offset: usize) -> &T {
        let at = HEADER_BYTES + offset;
        assert!(
            at + std::mem::size_of::<T>() <= self.len,
            "region too small"
        );
        assert_eq!(at % std::mem::align_of::<T>(), 0, "misaligned");
        &*(self.ptr.add(at) as *const T)
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a region always holds at least its header.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the header (magic last, so attachers never see a half-built region).
    pub fn publish(&self, arch: Arch, num_workers: u32, block_size: usize) {
        let h = self.ptr as *mut Header;
        // SAFETY: only the creator writes, before anyone can read (magic is still 0).
        unsafe {
            (*h).version = LAYOUT_VERSION;
            (*h).arch = arch.code();
            (*h).num_workers = num_workers;
            (*h).block_size = block_size as u32;
            (*h).total_size = self.len as u64;
        }
        let header = self.header();
        header
            .server_pid
            .store(std::process::id() as i32, Ordering::Relaxed);
        header.magic.store(MAGIC, Ordering::Release);
    }

    /// Checks the mapped header: the acquire load of `magic` orders the reads of the fields
    /// the server wrote before it, then [`check_header`] reads a copy of them.
    fn check_mapped_header(&self) -> Result<Arch, ShmkvError> {
        if self.header().magic.load(Ordering::Acquire) == 0 {
            return Err(ShmkvError::NotReady(self.path.clone()));
        }
        let mut fixed = [0u8; HEADER_FIXED_BYTES];
        // SAFETY: the mapping is at least HEADER_BYTES long, and these bytes are written only
        // before `magic` is published (the atomics that change later lie after them).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, fixed.as_mut_ptr(), HEADER_FIXED_BYTES) };
        check_header(&fixed, self.len, &self.path)
    }
}

/// The header's bytes that never change once published: `magic` up to `server_pid`.
pub const HEADER_FIXED_BYTES: usize = std::mem::offset_of!(Header, server_pid);

/// Checks a region's header from its first bytes (at least [`HEADER_FIXED_BYTES`]) against
/// the region's size: its magic, layout version, architecture, and that the workers and
/// block size it states are this build's layout of exactly `region_len` bytes. `path` names
/// the region in errors. Returns the architecture the header states.
pub fn check_header(header: &[u8], region_len: usize, path: &str) -> Result<Arch, ShmkvError> {
    let foreign = |why: String| ShmkvError::Foreign {
        path: path.to_string(),
        why,
    };
    if header.len() < HEADER_FIXED_BYTES {
        return Err(foreign(format!(
            "its header is {} bytes, shorter than {HEADER_FIXED_BYTES}",
            header.len()
        )));
    }
    let u32_at = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_ne_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let magic = u64_at(std::mem::offset_of!(Header, magic));
    let version = u32_at(std::mem::offset_of!(Header, version));
    let arch_code = u32_at(std::mem::offset_of!(Header, arch));
    let num_workers = u32_at(std::mem::offset_of!(Header, num_workers));
    let block_size = u32_at(std::mem::offset_of!(Header, block_size));
    let total_size = u64_at(std::mem::offset_of!(Header, total_size));
    if magic == 0 {
        return Err(ShmkvError::NotReady(path.to_string()));
    }
    if magic != MAGIC {
        return Err(foreign(format!("bad magic {magic:#018x}")));
    }
    if version != LAYOUT_VERSION {
        return Err(foreign(format!(
            "layout version {version} but this stairbench reads version {LAYOUT_VERSION}"
        )));
    }
    if total_size != region_len as u64 {
        return Err(foreign(format!(
            "header says {total_size} bytes but the object is {region_len}"
        )));
    }
    let arch = Arch::from_code(arch_code)
        .ok_or_else(|| foreign(format!("unknown architecture code {arch_code}")))?;
    let (block, expected_len) = arch.layout(num_workers as usize);
    if num_workers == 0 || block_size as usize != block || expected_len != region_len {
        return Err(foreign(format!(
            "{num_workers} workers of {block_size} bytes do not match this build's {block}-byte {} blocks",
            arch.name()
        )));
    }
    Ok(arch)
}

impl Region {
    /// Removes the region's name (the creator does so when it stops); mappings stay valid.
    pub fn unlink(&self) {
        if self.owner.swap(false, Ordering::AcqRel) {
            let _ = shm_unlink(self.shm_name.as_str());
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.unlink();
        // SAFETY: we mapped exactly this range and nobody uses it after drop.
        unsafe {
            let _ = munmap(
                std::ptr::NonNull::new_unchecked(self.ptr as *mut libc::c_void),
                self.len,
            );
        }
    }
}

/// Removes the region of `name` if it is a stairbench region whose server is gone (one
/// killed before it could clean up); whether it did. A live, foreign or absent one is left.
pub fn remove_stale(name: &str) -> bool {
    let (Ok(shm), Ok(path)) = (shm_name(name), path_of(name)) else {
        return false;
    };
    let Ok(fd) = shm_open(shm.as_str(), OFlag::O_RDONLY, Mode::empty()) else {
        return false;
    };
    let mut head = [0u8; std::mem::size_of::<Header>()];
    let read = std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::from(fd), &mut head, 0);
    let magic = u64::from_le_bytes(head[0..8].try_into().expect("8 bytes"));
    let at = std::mem::offset_of!(Header, server_pid);
    let pid = i32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    if read.is_err() || magic != MAGIC || pid_alive(pid) {
        return false;
    }
    eprintln!("stairbench: removed stale region {path} (its server, pid {pid}, is gone)");
    shm_unlink(shm.as_str()).is_ok()
}

/// An existing region may be replaced only if it is ours and its server is gone.
fn check_replaceable(shm: &str, path: &str) -> Result<(), ShmkvError> {
    let fd = shm_open(shm, OFlag::O_RDONLY, Mode::empty()).map_err(|e| io(path, "opening", e))?;
    let len = nix::sys::stat::fstat(fd.as_raw_fd())
        .map_err(|e| io(path, "inspecting", e))?
        .st_size as usize;
    let foreign = |why: &str| ShmkvError::Foreign {
        path: path.to_string(),
        why: format!("{why}; it was left alone (remove it if it is yours, or pick another --name)"),
    };
    if len < HEADER_BYTES {
        return Err(foreign("it is too small to be a stairbench shmkv region"));
    }
    let mut head = [0u8; std::mem::size_of::<Header>()];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::from(fd), &mut head, 0).map_err(
        |error| ShmkvError::Io {
            context: format!("reading {path}"),
            error,
        },
    )?;
    let magic = u64::from_le_bytes(head[0..8].try_into().expect("8 bytes"));
    let at = std::mem::offset_of!(Header, server_pid);
    let pid = i32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
    if magic != MAGIC && magic != 0 {
        return Err(foreign("it does not start with the stairbench shmkv magic"));
    }
    if pid_alive(pid) && pid != std::process::id() as i32 {
        return Err(ShmkvError::InUse {
            path: path.to_string(),
            pid,
        });
    }
    eprintln!("stairbench: replacing stale region {path} (its server, pid {pid}, is gone)");
    Ok(())
}

fn map(fd: &OwnedFd, len: usize, path: &str) -> Result<*mut u8, ShmkvError> {
    let size = std::num::NonZeroUsize::new(len).expect("non-empty region");
    // SAFETY: a fresh shared mapping of an object we opened read-write.
    let p = unsafe {
        mmap(
            None,
            size,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_SHARED,
            fd,
            0,
        )
    }
    .map_err(|e| io(path, "mapping", e))?;
    Ok(p.as_ptr() as *mut u8)
}

fn io(path: &str, doing: &str, e: nix::errno::Errno) -> ShmkvError {
    ShmkvError::Io {
        context: format!("{doing} {path}"),
        error: std::io::Error::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fits_before_the_body() {
        assert_eq!(std::mem::offset_of!(Header, magic), 0);
        assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);
    }

    /// The fixed header bytes a server of this build publishes for `arch` with `workers`.
    fn header_bytes(arch: Arch, workers: u32) -> Vec<u8> {
        let (block, len) = arch.layout(workers as usize);
        let mut b = Vec::new();
        b.extend(MAGIC.to_ne_bytes());
        b.extend(LAYOUT_VERSION.to_ne_bytes());
        b.extend(arch.code().to_ne_bytes());
        b.extend(workers.to_ne_bytes());
        b.extend((block as u32).to_ne_bytes());
        b.extend((len as u64).to_ne_bytes());
        assert_eq!(b.len(), HEADER_FIXED_BYTES);
        b
    }

    fn why(r: Result<Arch, ShmkvError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn a_published_header_checks_from_its_bytes() {
        for (arch, workers) in [(Arch::Single, 1), (Arch::PerWorker, 4), (Arch::Kvd, 2)] {
            let b = header_bytes(arch, workers);
            let len = arch.layout(workers as usize).1;
            assert_eq!(check_header(&b, len, "r").unwrap(), arch);
            // The rest of the header page (the live atomics) is not looked at.
            let mut page = b.clone();
            page.resize(HEADER_BYTES, 0xff);
            assert_eq!(check_header(&page, len, "r").unwrap(), arch);
        }
    }

    #[test]
    fn a_bad_header_says_what_is_wrong() {
        let len = Arch::PerWorker.layout(4).1;
        let good = header_bytes(Arch::PerWorker, 4);
        let with = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        assert!(why(check_header(&good[..31], len, "r")).contains("shorter than 32"));
        assert!(matches!(
            check_header(&with(0, &[0; 8]), len, "r"),
            Err(ShmkvError::NotReady(_))
        ));
        assert!(why(check_header(&with(0, b"NOTSHMKV"), len, "r")).contains("bad magic"));
        assert!(
            why(check_header(&with(8, &9u32.to_ne_bytes()), len, "r")).contains("layout version 9")
        );
        assert!(why(check_header(&good, len + 1, "r")).contains("but the object is"));
        assert!(why(check_header(&with(12, &7u32.to_ne_bytes()), len, "r"))
            .contains("unknown architecture code 7"));
        // Workers and block size that disagree with the size, and zero workers.
        assert!(why(check_header(&with(16, &5u32.to_ne_bytes()), len, "r")).contains("5 workers"));
        assert!(why(check_header(&with(20, &1u32.to_ne_bytes()), len, "r")).contains("of 1 bytes"));
        let zero = header_bytes(Arch::PerWorker, 0);
        let zero_len = Arch::PerWorker.layout(0).1;
        assert!(why(check_header(&zero, zero_len, "r")).contains("0 workers"));
    }

    #[test]
    fn the_shm_header_seed_corpus_is_this_builds_layout() {
        // bench/fuzz.sh seeds the shm_header target with these files; STAIRBENCH_BLESS=1
        // rewrites them when the layout changes.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/shmkv");
        for (file, arch, workers) in [
            ("single.hdr", Arch::Single, 1),
            ("per_worker4.hdr", Arch::PerWorker, 4),
            ("kvd2.hdr", Arch::Kvd, 2),
        ] {
            if std::env::var_os("STAIRBENCH_BLESS").is_some() {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(format!("{dir}/{file}"), header_bytes(arch, workers)).unwrap();
            }
            let bytes = std::fs::read(format!("{dir}/{file}")).unwrap();
            assert_eq!(bytes, header_bytes(arch, workers), "{file}");
            let len = arch.layout(workers as usize).1;
            assert_eq!(check_header(&bytes, len, file).unwrap(), arch);
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(shm_name("ok-name_1.x").is_ok());
        for bad in ["", "a/b", "sp ace", &"x".repeat(201)] {
            assert!(matches!(shm_name(bad), Err(ShmkvError::BadName(_))));
        }
    }
}
