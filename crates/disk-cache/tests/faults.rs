//! Fault injection on the disk cache: every damaged, foreign or concurrent entry is either
//! read whole and verified or reported invalid, never returned wrong.

use burn_compile_disk_cache::{DiskCache, Invalid, Lookup};
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bc-disk-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entry_file(cache: &DiskCache, kind: &str, key: &str) -> PathBuf {
    cache.root().join(kind).join(format!("{key}.entry"))
}

fn hit(lookup: Lookup) -> Vec<u8> {
    match lookup {
        Lookup::Hit(bytes) => bytes,
        other => panic!("expected a hit, got {other:?}"),
    }
}

#[test]
fn an_entry_round_trips_and_keys_differ_by_material_kind_and_versions() {
    let root = dir("round-trip");
    let cache = DiskCache::new(&root, "v1", u64::MAX);
    let key = cache.key("unit", b"source A");
    assert!(matches!(cache.get("unit", &key), Lookup::Miss));
    cache.put("unit", &key, b"payload A").unwrap();
    assert_eq!(hit(cache.get("unit", &key)), b"payload A");
    assert_ne!(key, cache.key("unit", b"source B"));
    assert_ne!(key, cache.key("tuning", b"source A"));
    let other = DiskCache::new(&root, "v2", u64::MAX);
    assert_ne!(key, other.key("unit", b"source A"));
    // A cache of other versions in the same directory: its entries are not ours.
    assert!(matches!(
        other.get("unit", &other.key("unit", b"source A")),
        Lookup::Miss
    ));
    // Replacing an entry.
    cache.put("unit", &key, b"payload A2").unwrap();
    assert_eq!(hit(cache.get("unit", &key)), b"payload A2");
}

#[test]
fn corrupt_truncated_and_foreign_entries_are_ignored_then_replaced() {
    let root = dir("faults");
    let cache = DiskCache::new(&root, "v1", u64::MAX);
    let key = cache.key("unit", b"k");
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    cache.put("unit", &key, &payload).unwrap();
    let file = entry_file(&cache, "unit", &key);
    let good = std::fs::read(&file).unwrap();

    // One payload byte flipped.
    let mut bytes = good.clone();
    let last = bytes.len() - 100;
    bytes[last] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    assert!(matches!(
        cache.get("unit", &key),
        Lookup::Invalid(Invalid::Corrupt(why)) if why.contains("checksum")
    ));

    // Cut short, as by a crash mid-write.
    std::fs::write(&file, &good[..good.len() - 1000]).unwrap();
    assert!(matches!(
        cache.get("unit", &key),
        Lookup::Invalid(Invalid::Truncated {
            expected: 4096,
            found: 3096
        })
    ));
    // Cut inside the header; empty; garbage.
    for bad in [&good[..20], &[][..], b"\x7fELF not an entry".as_slice()] {
        std::fs::write(&file, bad).unwrap();
        assert!(matches!(
            cache.get("unit", &key),
            Lookup::Invalid(Invalid::Corrupt(_))
        ));
    }

    // Written by another version (its header), under our name.
    let foreign = DiskCache::new(root.join("foreign"), "v0", u64::MAX);
    foreign.put("unit", &key, &payload).unwrap();
    std::fs::copy(entry_file(&foreign, "unit", &key), &file).unwrap();
    assert!(matches!(
        cache.get("unit", &key),
        Lookup::Invalid(Invalid::OtherVersion(v)) if v == "v0"
    ));

    // Another entry's file under this name.
    let other_key = cache.key("unit", b"other");
    cache.put("unit", &other_key, b"other").unwrap();
    std::fs::copy(entry_file(&cache, "unit", &other_key), &file).unwrap();
    assert!(matches!(
        cache.get("unit", &key),
        Lookup::Invalid(Invalid::Corrupt(why)) if why.contains("holds")
    ));

    // The rebuild replaces the bad entry.
    cache.put("unit", &key, &payload).unwrap();
    assert_eq!(hit(cache.get("unit", &key)), payload);
}

#[test]
fn the_size_cap_evicts_the_least_recently_used() {
    let root = dir("evict");
    // Room for about three entries of 1000 bytes (each ~1.2 kB with its header).
    let cache = DiskCache::new(&root, "v1", 3800);
    let keys: Vec<String> = (0..3).map(|i| cache.key("unit", &[i])).collect();
    for k in &keys {
        cache.put("unit", k, &[1; 1000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Key 0 used again: key 1 is now the least recently used.
    hit(cache.get("unit", &keys[0]));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let fourth = cache.key("unit", &[3]);
    cache.put("unit", &fourth, &[1; 1000]).unwrap();
    assert!(cache.size() <= 3800);
    assert!(matches!(cache.get("unit", &keys[1]), Lookup::Miss));
    for k in [&keys[0], &keys[2], &fourth] {
        hit(cache.get("unit", k));
    }
}

#[test]
fn a_bundle_exports_and_imports_only_valid_entries_of_our_versions() {
    let root = dir("bundle");
    let cache = DiskCache::new(root.join("a"), "v1", u64::MAX);
    let keys: Vec<String> = (0..3).map(|i| cache.key("unit", &[i])).collect();
    for (i, k) in keys.iter().enumerate() {
        cache
            .put("unit", k, format!("payload {i}").as_bytes())
            .unwrap();
    }
    let tuning = cache.key("tuning", b"t");
    cache.put("tuning", &tuning, b"choice").unwrap();
    // A damaged entry stays out of the bundle.
    let bad = entry_file(&cache, "unit", &keys[2]);
    let mut bytes = std::fs::read(&bad).unwrap();
    bytes.truncate(bytes.len() - 2);
    std::fs::write(&bad, bytes).unwrap();

    let bundle = root.join("cache.tar");
    assert_eq!(cache.export(&bundle).unwrap(), 3);

    let fresh = DiskCache::new(root.join("b"), "v1", u64::MAX);
    let report = fresh.import(&bundle).unwrap();
    assert_eq!(report.imported, 3, "{report:?}");
    assert!(report.skipped.is_empty());
    assert_eq!(hit(fresh.get("unit", &keys[0])), b"payload 0");
    assert_eq!(hit(fresh.get("tuning", &tuning)), b"choice");
    assert!(matches!(fresh.get("unit", &keys[2]), Lookup::Miss));

    // Another cache's directory travels whole.
    let with_foreign = DiskCache::new(root.join("a"), "v1", u64::MAX).with_foreign_dir("cubecl");
    std::fs::create_dir_all(root.join("a/cubecl/ptx/cuda")).unwrap();
    std::fs::write(root.join("a/cubecl/ptx/cuda/chunk-0"), b"ptx bytes").unwrap();
    let bundle2 = root.join("cache2.tar");
    assert_eq!(with_foreign.export(&bundle2).unwrap(), 3);
    let target = DiskCache::new(root.join("e"), "v1", u64::MAX).with_foreign_dir("cubecl");
    let report = target.import(&bundle2).unwrap();
    assert_eq!((report.imported, report.foreign), (3, 1));
    assert_eq!(
        std::fs::read(root.join("e/cubecl/ptx/cuda/chunk-0")).unwrap(),
        b"ptx bytes"
    );

    // Another version's bundle: nothing imported, each entry says why.
    let other = DiskCache::new(root.join("c"), "v2", u64::MAX);
    let report = other.import(&bundle).unwrap();
    assert_eq!(report.imported, 0);
    assert_eq!(report.skipped.len(), 3);
    assert!(report.skipped[0].1.contains("other versions"), "{report:?}");

    // Not a bundle at all: an error, nothing written.
    let junk = root.join("junk.tar");
    std::fs::write(&junk, b"this is not a tar file, just some bytes").unwrap();
    let empty = DiskCache::new(root.join("d"), "v1", u64::MAX);
    assert!(empty.import(&junk).is_err() || empty.size() == 0);
    assert_eq!(empty.size(), 0);
}

/// The writer and reader half of `two_processes_share_one_directory`, run as a child.
#[test]
fn child_process_hammering_the_cache() {
    let Ok(root) = std::env::var("BC_DISK_CACHE_CHILD_DIR") else {
        return; // Only as the child of the test below.
    };
    let me: u8 = std::env::var("BC_DISK_CACHE_CHILD")
        .unwrap()
        .parse()
        .unwrap();
    let cache = DiskCache::new(Path::new(&root), "v1", u64::MAX);
    let valid = |bytes: &[u8]| {
        // Every payload ever written is 64 KiB of one byte.
        bytes.len() == 65536 && bytes.iter().all(|b| *b == bytes[0])
    };
    for round in 0..200u32 {
        let key = cache.key("unit", &[(round % 4) as u8]);
        if round % 2 == u32::from(me) {
            cache
                .put("unit", &key, &vec![me.wrapping_add(round as u8); 65536])
                .unwrap();
        }
        match cache.get("unit", &key) {
            Lookup::Hit(bytes) => assert!(valid(&bytes), "a torn entry was returned"),
            Lookup::Miss => {}
            Lookup::Invalid(why) => panic!("a whole write was seen half-done: {why}"),
        }
    }
}

#[test]
fn two_processes_share_one_directory() {
    let root = dir("processes");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_process_hammering_the_cache",
                    "--nocapture",
                ])
                .env("BC_DISK_CACHE_CHILD_DIR", &root)
                .env("BC_DISK_CACHE_CHILD", i.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a child saw a bad entry");
    }
    let cache = DiskCache::new(&root, "v1", u64::MAX);
    for i in 0..4u8 {
        assert_eq!(
            hit(cache.get("unit", &cache.key("unit", &[i]))).len(),
            65536
        );
    }
    // No temporary file is left behind.
    let leftovers = std::fs::read_dir(root.join("unit"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .count();
    assert_eq!(leftovers, 0);
}
