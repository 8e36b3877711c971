//! The gateway's global allocator: mimalloc, asked the way the standard
//! library asks the system's `malloc`.
//!
//! The `mimalloc` crate passes every allocation to mimalloc's aligned
//! entry points. Those serve a block from the fast path only when the
//! size's bin is a power of two; any other size (48 bytes, every block
//! over 1 KiB that is not a power of two up to 4 KiB) is over-allocated
//! by its alignment whenever the fast path misses, so it costs more
//! instructions and lands in a larger bin. Yet mimalloc's plain blocks
//! already have every alignment Rust asks for almost always: a block of
//! 16 bytes or more starts on 16 bytes, a smaller one on a multiple of 8.
//! So a request whose alignment is at most 16 and at most its size (the
//! test the standard library's `System` makes) goes to plain `mi_malloc`,
//! and only the rest to the aligned entry points.

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every plain mimalloc block of at least this many bytes
/// has (`MI_MAX_ALIGN_SIZE`: its pages start their first block on 16
/// bytes and size their bins in multiples of 16 from 16 up).
const PLAIN_ALIGN: usize = 16;

/// Returns the memory of the calling thread's freed blocks (and of ended
/// threads') to the operating system at once, where mimalloc would keep it
/// until the thread allocates again after a delay: for work that allocates
/// much and keeps little, on a thread that may then stay idle — loading a
/// catalog.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` takes no pointer and may be called from any
    // thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        mi::mi_collect(true);
    }
}

/// mimalloc, asked for an alignment only when it must be.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mimalloc;

/// `true` when a plain block of `size` bytes is aligned to `align`: a
/// power of two no larger than 16 nor than the size (a block smaller than
/// 16 bytes starts on a multiple of 8, and its alignment is at most 8).
#[inline]
fn plain(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: each method passes mimalloc a size (and an alignment, when the
// plain block would not have it) and returns what mimalloc returns: null
// on failure, else a block of at least that size with that alignment
// (`plain`). Every block, aligned or not, is freed by `mi_free` and
// resized by `mi_realloc`/`mi_realloc_aligned`, which accept any block
// mimalloc gave.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if plain(layout.size(), layout.align()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` is a block this allocator gave (the caller's
        // promise), so mimalloc's.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: see the impl; `ptr` is a block this allocator gave.
        unsafe {
            if plain(new_size, layout.align()) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// Every size up to 1,100 bytes, some to 5 KiB and a few larger, with every alignment up to
    /// 4 KiB: each block has its alignment, keeps its bytes through a
    /// resize, and a zeroed one is zero.
    #[test]
    fn every_block_has_its_alignment_and_keeps_its_bytes() {
        let sizes = (1..=1100).chain((1101..=5120).step_by(37)).chain([
            8191,
            8192,
            16_385,
            65_536,
            1 << 20,
        ]);
        let mut checked = 0;
        for size in sizes {
            for shift in 0..=12 {
                let align = 1usize << shift;
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                // SAFETY: a layout of non-zero size; each block is used
                // within its size and given back once.
                unsafe {
                    let p = Mimalloc.alloc(layout);
                    assert!(!p.is_null(), "{size} {align}");
                    assert_eq!(p as usize % align, 0, "alloc {size} {align}");
                    p.write_bytes(0xa5, size);
                    let grown = size + size / 2 + 1;
                    let q = Mimalloc.realloc(p, layout, grown);
                    assert_eq!(q as usize % align, 0, "realloc {size} {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xa5), "{size} {align}");
                    let shrunk = size.div_ceil(3);
                    let grown_layout = Layout::from_size_align_unchecked(grown, align);
                    let r = Mimalloc.realloc(q, grown_layout, shrunk);
                    assert_eq!(r as usize % align, 0, "shrink {size} {align}");
                    assert!((0..shrunk).all(|i| *r.add(i) == 0xa5), "{size} {align}");
                    Mimalloc.dealloc(r, Layout::from_size_align_unchecked(shrunk, align));
                    let z = Mimalloc.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed {size} {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0), "{size} {align}");
                    Mimalloc.dealloc(z, layout);
                }
                checked += 1;
            }
        }
        assert!(checked > 15_000, "{checked}");
    }

    #[test]
    fn only_what_a_plain_block_satisfies_skips_the_aligned_path() {
        assert!(plain(48, 8));
        assert!(plain(16, 16));
        assert!(plain(1, 1));
        assert!(plain(8, 8));
        assert!(!plain(8, 16), "a block under 16 bytes starts on 8 only");
        assert!(!plain(64, 32));
        assert!(!plain(4096, 4096));
    }
}
