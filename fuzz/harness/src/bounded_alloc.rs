//! An allocator that aborts on any single allocation past [`MAX_ALLOCATION`]: how a
//! harness finds memory reserved by what an input claims rather than by what it holds.
//! libFuzzer's own `-malloc_limit_mb` needs a sanitizer's malloc hooks, so without one
//! (`cargo fuzz … -s none`) it does nothing; this allocator holds the bound in every
//! build of the targets (`cfg(fuzzing)`) and in the replay test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;

/// The largest single allocation a harness may make: past every parser's documented
/// bound on the inputs the targets take (an ArrayRecord blob of 256 KiB may claim
/// 1 100 times its size, some 280 MiB).
pub const MAX_ALLOCATION: usize = 1 << 30;

/// The system allocator, aborting with a message on an allocation past
/// [`MAX_ALLOCATION`] (an allocator may not unwind).
pub struct BoundedAlloc;

thread_local! {
    /// The input this thread replays, named in the message (pointer and length of its
    /// name, which outlives the call [`replaying`] makes).
    static INPUT: Cell<(*const u8, usize)> = const { Cell::new((std::ptr::null(), 0)) };
}

/// Runs `f` with `name` as the input an excess is reported against.
pub fn replaying<T>(name: &str, f: impl FnOnce() -> T) -> T {
    INPUT.with(|input| input.set((name.as_ptr(), name.len())));
    let out = f();
    INPUT.with(|input| input.set((std::ptr::null(), 0)));
    out
}

fn check(size: usize) {
    if size <= MAX_ALLOCATION {
        return;
    }
    // No allocation from here: digits on the stack, the input's name as set.
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = size;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(b"probeflow-fuzz: a single allocation of ");
    let _ = err.write_all(&digits[at..]);
    let _ = err.write_all(b" bytes, past the harness bound of 1 GiB");
    let (name, len) = INPUT.try_with(Cell::get).unwrap_or((std::ptr::null(), 0));
    if !name.is_null() {
        let _ = err.write_all(b", replaying ");
        // SAFETY: `replaying` set these from a live &str and clears them on return.
        let _ = err.write_all(unsafe { std::slice::from_raw_parts(name, len) });
    }
    let _ = err.write_all(b"\n");
    std::process::abort();
}

// SAFETY: forwards to the system allocator after a check that does not allocate.
unsafe impl GlobalAlloc for BoundedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(fuzzing)]
#[global_allocator]
static ALLOCATOR: BoundedAlloc = BoundedAlloc;
