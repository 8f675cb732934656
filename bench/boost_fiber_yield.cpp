// boost_fiber_yield — a scheduler-level peer: nanoseconds per
// boost::this_fiber::yield() when two Boost.Fiber fibers ping-pong through
// Boost.Fiber's default round-robin scheduler (built on Boost.Context).
//
//   boost_fiber_yield N REPS   each fiber yields N times; one yield is one
//                              switch
//
// Prints one figure (ns per switch) per repetition, one per line.
#include <boost/fiber/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>

static double bench(long n)
{
    auto body = [n] {
        for (long i = 0; i < n; i++)
            boost::this_fiber::yield();
    };
    auto t0 = std::chrono::steady_clock::now();
    boost::fibers::fiber a(body), b(body);
    a.join();
    b.join();
    auto t1 = std::chrono::steady_clock::now();
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    return ns / (2.0 * (double)n);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 10000000;
    int reps = argc > 2 ? std::atoi(argv[2]) : 5;
    bench(1000); // warm up
    for (int r = 0; r < reps; r++) {
        std::printf("%.2f\n", bench(n));
        std::fflush(stdout);
    }
    return 0;
}
