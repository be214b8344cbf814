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
        let arch = region.check_header()?;
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

    fn check_header(&self) -> Result<Arch, ShmkvError> {
        let h = self.header();
        let foreign = |why: String| ShmkvError::Foreign {
            path: self.path.clone(),
            why,
        };
        let magic = h.magic.load(Ordering::Acquire);
        if magic == 0 {
            return Err(ShmkvError::NotReady(self.path.clone()));
        }
        if magic != MAGIC {
            return Err(foreign(format!("bad magic {magic:#018x}")));
        }
        if h.version != LAYOUT_VERSION {
            return Err(foreign(format!(
                "layout version {} but this stairbench reads version {LAYOUT_VERSION}",
                h.version
            )));
        }
        if h.total_size != self.len as u64 {
            return Err(foreign(format!(
                "header says {} bytes but the object is {}",
                h.total_size, self.len
            )));
        }
        let arch = Arch::from_code(h.arch)
            .ok_or_else(|| foreign(format!("unknown architecture code {}", h.arch)))?;
        let (block, expected_len) = arch.layout(h.num_workers as usize);
        if h.num_workers == 0 || h.block_size as usize != block || expected_len != self.len {
            return Err(foreign(format!(
                "{} workers of {} bytes do not match this build's {}-byte {} blocks",
                h.num_workers,
                h.block_size,
                block,
                arch.name()
            )));
        }
        Ok(arch)
    }
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
        |source| ShmkvError::Io {
            context: format!("reading {path}"),
            source,
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
        source: std::io::Error::from(e),
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

    #[test]
    fn names_are_checked() {
        assert!(shm_name("ok-name_1.x").is_ok());
        for bad in ["", "a/b", "sp ace", &"x".repeat(201)] {
            assert!(matches!(shm_name(bad), Err(ShmkvError::BadName(_))));
        }
    }
}
