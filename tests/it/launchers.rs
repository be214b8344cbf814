//! `serve kvd` ranks started the way a cluster's launcher starts them: no `--rank`, the rank
//! read from SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK (mpirun) or PMI_RANK, and a launched
//! rank j > 0 serving region NAME-rj, as the runner names them.

use crate::common;

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use stairbench::wire::kvd::attach;
use stairbench::wire::shmkv::msg::{OP_GET, OP_SET, ST_OK};
use stairbench::wire::shmkv::per_worker::Client;
use stairbench::wire::shmkv::region_path;

/// A rank started with `var=value` in its environment and no `--rank`; killed when dropped.
struct Launched {
    child: Child,
    region: String,
}

impl Launched {
    fn spawn(var: &str, value: &str, ranks: &str, name: &str, region: &str) -> Launched {
        let mut cmd = common::cli_cmd();
        for v in stairbench::serve::kvd::RANK_VARS {
            cmd.env_remove(v);
        }
        let child = cmd
            .env(var, value)
            .args(["serve", "kvd", "--ranks", ranks, "--name", name])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start serve kvd");
        Launched {
            child,
            region: region.to_string(),
        }
    }

    fn client(&self) -> Client {
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            match attach(&self.region, Duration::from_secs(15)) {
                Ok(a) => return Client::attach(a.region).expect("a slot"),
                Err(e) if Instant::now() > until => panic!("{} never ready: {e}", self.region),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// SIGTERM, then its stderr (within 15 s: no hang).
    fn stop(mut self) -> String {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < until, "serve kvd did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        err
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(p) = region_path(&self.region) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("key:{k:04}").into_bytes()
}

/// Two ranks launched by `first_var` and `second_var`: a key SET through one rank is read
/// through the other, and each says where its rank came from.
fn two_launched_ranks_answer_each_other(first_var: &str, second_var: &str, tag: &str) {
    let ranks = format!(
        "127.0.0.1:{},127.0.0.1:{}",
        common::free_port(),
        common::free_port()
    );
    let name = common::unique_name(&format!("launch-{tag}"));
    let r0 = Launched::spawn(first_var, "0", &ranks, &name, &name);
    let r1 = Launched::spawn(second_var, "1", &ranks, &name, &format!("{name}-r1"));
    let (mut c0, mut c1) = (r0.client(), r1.client());
    let t = Duration::from_secs(5);
    for k in 0..64u64 {
        let value = format!("v{k}");
        let set = c0.call(OP_SET, &key(k), value.as_bytes(), t).unwrap();
        assert_eq!(set.status, ST_OK, "SET {k}");
        let got = c1.call(OP_GET, &key(k), b"", t).unwrap();
        assert_eq!(got.status, ST_OK, "GET {k} through rank 1");
        assert_eq!(&got.value[..got.value_len as usize], value.as_bytes());
    }
    let (err0, err1) = (r0.stop(), r1.stop());
    assert!(
        err0.contains(&format!("kvd: rank 0 from {first_var}; region {name}\n")),
        "{err0}"
    );
    let line = format!("kvd: rank 1 from {second_var}; region {name}-r1\n");
    assert!(err1.contains(&line), "{err1}");
    assert!(err1.contains("kvd: rank 1 of 2 serving"), "{err1}");
}

#[test]
fn ranks_launched_by_srun_take_their_rank_from_slurm_procid() {
    two_launched_ranks_answer_each_other("SLURM_PROCID", "SLURM_PROCID", "slurm");
}

#[test]
fn ranks_launched_by_mpirun_or_pmi_take_their_rank_from_its_variable() {
    two_launched_ranks_answer_each_other("OMPI_COMM_WORLD_RANK", "PMI_RANK", "mpi");
}

#[test]
fn a_launcher_rank_that_is_not_a_number_is_refused_with_its_name() {
    let out = common::cli_cmd()
        .env("SLURM_PROCID", "one")
        .args([
            "serve",
            "kvd",
            "--ranks",
            "127.0.0.1:1,127.0.0.1:2",
            "--name",
            "x",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("SLURM_PROCID=\"one\" is not a rank number (or give --rank N)"),
        "{err}"
    );
}
