//! The system C compiler: a graph's translation unit built into a shared object, and loaded.
//! (The disk cache of built objects is the runtime's: `burn-compile-disk-cache`, keyed by the
//! source and [`Toolchain::fingerprint`].)

use std::ffi::c_void;
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
    /// A build or load file could not be written.
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
            BuildError::Io(e) => write!(f, "a build file could not be written: {e}"),
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

    /// What besides the source determines the binary: the compiler, its identity and the
    /// flags (part of the disk cache's key, so a compiler upgrade or other flags rebuild).
    pub fn fingerprint(&self) -> String {
        let mut parts = vec![self.compiler.as_str(), self.identity.as_str()];
        parts.extend(self.flags.iter().map(String::as_str));
        parts.join("\0")
    }

    /// Compiles `source` into a shared object, in a fresh directory under `work_dir` removed
    /// afterwards, and returns the object's bytes.
    pub fn compile(&self, source: &str, work_dir: &Path) -> Result<Vec<u8>, BuildError> {
        let io = |e: std::io::Error| BuildError::Io(e.to_string());
        std::fs::create_dir_all(work_dir).map_err(io)?;
        let dir = tempfile::Builder::new()
            .prefix(".build-")
            .tempdir_in(work_dir)
            .map_err(io)?;
        let c_file = dir.path().join("unit.c");
        let object = dir.path().join("unit.so");
        std::fs::write(&c_file, source).map_err(io)?;
        let output = Command::new(&self.compiler)
            .args(&self.flags)
            .args(["-shared", "-fPIC", "-o"])
            .arg(&object)
            .arg(&c_file)
            .args(LIBRARIES)
            .output()
            .map_err(|e| BuildError::NoCompiler {
                compiler: self.compiler.clone(),
                error: e.to_string(),
            })?;
        if !output.status.success() {
            return Err(BuildError::Compile {
                compiler: self.compiler.clone(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        std::fs::read(&object).map_err(io)
    }

    /// Compiles `source` and loads it (no cache: see `burn-compile-disk-cache`).
    pub fn build(&self, source: &str, work_dir: &Path) -> Result<Unit, BuildError> {
        let start = Instant::now();
        let object = self.compile(source, work_dir)?;
        let mut unit = Unit::load(&object, work_dir)?;
        unit.build_time = start.elapsed();
        Ok(unit)
    }
}

/// A loaded shared object of generated kernels, unloaded when dropped: whoever calls its
/// kernels keeps it alive. (It links no threading runtime — threads are the caller's — so
/// nothing of it outlives a call.)
pub struct Unit {
    library: libloading::Library,
    /// Time to compile (or find) and load it.
    pub build_time: Duration,
}

impl Unit {
    /// Loads a shared object's bytes: written to a file of this process under `work_dir`,
    /// opened, and the file removed (the mapping stays), so that no other process's write
    /// of the same unit can change what is loaded.
    pub fn load(object: &[u8], work_dir: &Path) -> Result<Unit, BuildError> {
        let start = Instant::now();
        let io = |e: std::io::Error| BuildError::Io(e.to_string());
        std::fs::create_dir_all(work_dir).map_err(io)?;
        let mut file = tempfile::Builder::new()
            .prefix(".load-")
            .suffix(".so")
            .tempfile_in(work_dir)
            .map_err(io)?;
        std::io::Write::write_all(&mut file, object).map_err(io)?;
        let path: PathBuf = file.path().to_path_buf();
        // SAFETY: the object was built from generated kernels, whose initializers do nothing.
        let library = unsafe { libloading::Library::new(&path) }
            .map_err(|e| BuildError::Load(e.to_string()))?;
        drop(file);
        Ok(Unit {
            library,
            build_time: start.elapsed(),
        })
    }

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
