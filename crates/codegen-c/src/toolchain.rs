//! The system C compiler: a graph's translation unit built into a shared object, cached on disk
//! by what determines the binary (source, compiler identity, flags), and loaded.

use std::ffi::c_void;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A generated kernel as the shared object exports it: inputs, outputs, scalars, and the range
/// of tasks to compute (see `CFunction`).
pub type KernelFn =
    unsafe extern "C" fn(*const *const c_void, *const *mut c_void, *const f64, i64, i64);

/// Why a unit could not be built or loaded.
#[derive(Debug)]
pub enum BuildError {
    /// The compiler could not be started (not installed, not on `PATH`).
    NoCompiler { compiler: String, error: String },
    /// The compiler rejected the unit; its diagnostics.
    Compile { compiler: String, stderr: String },
    /// The shared object or a symbol could not be loaded.
    Load(String),
    /// The cache directory could not be written.
    Io(String),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::NoCompiler { compiler, error } => {
                write!(f, "no C compiler: `{compiler}` could not be run ({error})")
            }
            BuildError::Compile { compiler, stderr } => {
                write!(f, "`{compiler}` rejected the generated C:\n{stderr}")
            }
            BuildError::Load(e) => write!(f, "the built kernels could not be loaded: {e}"),
            BuildError::Io(e) => write!(f, "the kernel cache could not be written: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// What a unit links: `libm`, and on x86-64 glibc its vector variants (`libmvec`: the unit
/// declares them, see `c_unit`).
const LIBRARIES: &[&str] = if cfg!(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu"
)) {
    &["-lmvec", "-lm"]
} else {
    &["-lm"]
};

/// The C compiler and the flags kernels are built with.
#[derive(Clone, Debug)]
pub struct Toolchain {
    pub compiler: String,
    pub flags: Vec<String>,
    /// The compiler's own first line of `--version`: part of the cache key, so a compiler
    /// upgrade rebuilds.
    pub identity: String,
}

impl Toolchain {
    /// Optimized for this machine, vectorizable without changing results (`-fno-math-errno`
    /// only lets `sqrt` be an instruction). `-fopenmp-simd` reads the `omp simd` pragmas (a
    /// reduction loop may be vectorized) without OpenMP's runtime: threads are the caller's.
    pub const DEFAULT_FLAGS: &'static str = "-O3 -march=native -fopenmp-simd -fno-math-errno";

    /// `compiler` (default: `$CC`, else `cc`) with `flags` (default: [`Self::DEFAULT_FLAGS`]),
    /// if it runs.
    pub fn new(compiler: Option<&str>, flags: Option<&str>) -> Result<Toolchain, BuildError> {
        let compiler = compiler
            .map(str::to_string)
            .or_else(|| std::env::var("CC").ok().filter(|c| !c.is_empty()))
            .unwrap_or_else(|| "cc".to_string());
        let flags = flags
            .unwrap_or(Self::DEFAULT_FLAGS)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let version = Command::new(&compiler)
            .arg("--version")
            .output()
            .map_err(|e| BuildError::NoCompiler {
                compiler: compiler.clone(),
                error: e.to_string(),
            })?;
        let identity = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        Ok(Toolchain {
            compiler,
            flags,
            identity,
        })
    }

    /// The cache key of `source` built by this toolchain: 128 bits of two FNV-1a hashes over
    /// the source, the compiler's identity and the flags.
    pub fn key(&self, source: &str) -> String {
        let hash = |seed: u64| {
            let mut h = Fnv(seed);
            h.write(source.as_bytes());
            h.write(&[0]);
            h.write(self.compiler.as_bytes());
            h.write(&[0]);
            h.write(self.identity.as_bytes());
            for f in &self.flags {
                h.write(&[0]);
                h.write(f.as_bytes());
            }
            h.finish()
        };
        format!(
            "{:016x}{:016x}",
            hash(0xcbf2_9ce4_8422_2325),
            hash(0x8422_2325_cbf2_9ce4)
        )
    }

    /// Builds `source` into a shared object in `cache_dir` (or finds it there, built before by
    /// the same toolchain) and loads it. The source is kept beside it (`<key>.c`) for review.
    pub fn build(&self, source: &str, cache_dir: &Path) -> Result<Unit, BuildError> {
        let key = self.key(source);
        let object = cache_dir.join(format!("{key}.so"));
        let start = Instant::now();
        let cached = object.exists();
        if !cached {
            std::fs::create_dir_all(cache_dir).map_err(|e| BuildError::Io(e.to_string()))?;
            let c_file = cache_dir.join(format!("{key}.c"));
            std::fs::write(&c_file, source).map_err(|e| BuildError::Io(e.to_string()))?;
            // Built under a name of this process, then renamed: another process building the
            // same unit never loads a half-written object.
            let partial = cache_dir.join(format!("{key}.{}.so.partial", std::process::id()));
            let output = Command::new(&self.compiler)
                .args(&self.flags)
                .args(["-shared", "-fPIC", "-o"])
                .arg(&partial)
                .arg(&c_file)
                .args(LIBRARIES)
                .output()
                .map_err(|e| BuildError::NoCompiler {
                    compiler: self.compiler.clone(),
                    error: e.to_string(),
                })?;
            if !output.status.success() {
                let _ = std::fs::remove_file(&partial);
                return Err(BuildError::Compile {
                    compiler: self.compiler.clone(),
                    stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
                });
            }
            std::fs::rename(&partial, &object).map_err(|e| BuildError::Io(e.to_string()))?;
        }
        // SAFETY: the object was built from generated kernels, whose initializers do nothing.
        let library = unsafe { libloading::Library::new(&object) }
            .map_err(|e| BuildError::Load(e.to_string()))?;
        Ok(Unit {
            library,
            path: object,
            cached,
            build_time: start.elapsed(),
        })
    }
}

/// A loaded shared object of generated kernels, unloaded when dropped: whoever calls its
/// kernels keeps it alive. (It links no threading runtime — threads are the caller's — so
/// nothing of it outlives a call.)
pub struct Unit {
    library: libloading::Library,
    pub path: PathBuf,
    /// Found in the cache (not compiled by this call).
    pub cached: bool,
    /// Time to compile (or find) and load it.
    pub build_time: Duration,
}

impl Unit {
    /// The kernel function `name`.
    pub fn kernel(&self, name: &str) -> Result<KernelFn, BuildError> {
        // SAFETY: every exported kernel has the `KernelFn` signature (`c_function`).
        unsafe {
            self.library
                .get::<KernelFn>(name.as_bytes())
                .map(|s| *s)
                .map_err(|e| BuildError::Load(e.to_string()))
        }
    }
}

/// FNV-1a, 64 bits, from a given offset basis.
struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
