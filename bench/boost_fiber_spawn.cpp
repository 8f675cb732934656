// boost_fiber_spawn — the scheduler-level peer of core_spawn wg/join:
// nanoseconds per create + run + exit of a Boost.Fiber fiber that returns
// at once, under Boost.Fiber's default round-robin scheduler. Stacks come
// from pooled_fixedsize_stack (64 KiB, a memory pool, no guard page).
//
//   boost_fiber_spawn batch N REPS   create 100 fibers, join them all,
//                                    repeat
//   boost_fiber_spawn join N REPS    create one fiber, join it, repeat
//
// Prints one figure (ns per fiber) per repetition, one per line.
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <boost/fiber/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const std::size_t kStack = 64 * 1024;
static const long kBatch = 100;

static double bench(long n, bool batch)
{
    boost::fibers::pooled_fixedsize_stack pool(kStack);
    std::vector<boost::fibers::fiber> all;
    all.reserve(kBatch);
    auto t0 = std::chrono::steady_clock::now();
    long done = 0;
    while (done < n) {
        long b = batch ? (n - done < kBatch ? n - done : kBatch) : 1;
        for (long i = 0; i < b; i++)
            all.emplace_back(std::allocator_arg, pool, [] {});
        for (auto &f : all)
            f.join();
        all.clear();
        done += b;
    }
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / (double)n;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (std::strcmp(argv[1], "batch") && std::strcmp(argv[1], "join"))) {
        std::fprintf(stderr, "usage: %s batch|join [N [REPS]]\n", argv[0]);
        return 2;
    }
    bool batch = !std::strcmp(argv[1], "batch");
    long n = argc > 2 ? std::atol(argv[2]) : 1000000;
    int reps = argc > 3 ? std::atoi(argv[3]) : 5;
    bench(10000, batch); // warm up
    for (int r = 0; r < reps; r++) {
        std::printf("%.2f\n", bench(n, batch));
        std::fflush(stdout);
    }
    return 0;
}
