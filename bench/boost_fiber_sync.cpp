// boost_fiber_sync — the peer of bench/sync_bench.c: the same workloads on
// Boost.Fiber (default round-robin scheduler, one thread).
//
//   boost_fiber_sync mutex N REPS  2 fibers: lock, yield, unlock (N each);
//                                  ns per lock/unlock
//   boost_fiber_sync chan N REPS   ping-pong over two unbuffered_channel<int>;
//                                  ns per round trip
//   boost_fiber_sync then N REPS   a 10-step continuation chain: Boost.Fiber
//                                  has no then(), so each step is what its
//                                  users write — fibers::async waiting on the
//                                  previous future; ns per chain
//   boost_fiber_sync limit N REPS  N tasks (each yields once), at most 16
//                                  running: a counting semaphore made of
//                                  fibers::mutex + condition_variable (Boost
//                                  has no semaphore); ns per task
//
// Fiber stacks come from a pooled_fixedsize_stack of 64 KiB (weft's default
// stack size, and weft reuses stacks from a cache).
// Prints one figure per repetition, one per line.
#include <boost/fiber/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bf = boost::fibers;
using clk = std::chrono::steady_clock;

// Fibers get their stacks from a pool, as weft's come from its stack cache.
static bf::pooled_fixedsize_stack salloc(64 * 1024);

static double since(clk::time_point t0, long n)
{
    return std::chrono::duration<double, std::nano>(clk::now() - t0).count() /
           (double)n;
}

static double bench_mutex(long n)
{
    bf::mutex mu;
    long counter = 0;
    auto body = [&] {
        for (long i = 0; i < n; i++) {
            mu.lock();
            counter++;
            boost::this_fiber::yield();
            mu.unlock();
        }
    };
    auto t0 = clk::now();
    bf::fiber a(body), b(body);
    a.join();
    b.join();
    if (counter != 2 * n)
        std::abort();
    return since(t0, 2 * n);
}

static double bench_chan(long n)
{
    bf::unbuffered_channel<int> ping, pong;
    bf::fiber echo([&] {
        int v;
        while (ping.pop(v) == bf::channel_op_status::success)
            pong.push(v);
    });
    auto t0 = clk::now();
    for (long i = 0; i < n; i++) {
        int v = (int)i, w;
        ping.push(v);
        pong.pop(w);
        if (w != v)
            std::abort();
    }
    double r = since(t0, n);
    ping.close();
    echo.join();
    return r;
}

static double bench_then(long n)
{
    auto t0 = clk::now();
    for (long i = 0; i < n; i++) {
        bf::promise<long> p;
        bf::future<long> f = p.get_future();
        for (int k = 0; k < 10; k++)
            f = bf::async(bf::launch::post, std::allocator_arg, salloc,
                          [prev = std::move(f)]() mutable { return prev.get() + 1; });
        p.set_value(i);
        if (f.get() != i + 10)
            std::abort();
    }
    return since(t0, n);
}

static double bench_limit(long n)
{
    bf::mutex mu;
    bf::condition_variable cv;
    long running = 0, done = 0;
    const long limit = 16;
    auto t0 = clk::now();
    for (long i = 0; i < n; i++) {
        {
            std::unique_lock<bf::mutex> lk(mu);
            cv.wait(lk, [&] { return running < limit; });
            running++;
        }
        bf::fiber(std::allocator_arg, salloc, [&] {
            boost::this_fiber::yield();
            std::unique_lock<bf::mutex> lk(mu);
            running--;
            done++;
            cv.notify_one(); // only the spawner waits
        }).detach();
    }
    {
        std::unique_lock<bf::mutex> lk(mu);
        cv.wait(lk, [&] { return running == 0; });
    }
    if (done != n)
        std::abort();
    return since(t0, n);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    double (*fn)(long) = !std::strcmp(argv[1], "mutex") ? bench_mutex
                       : !std::strcmp(argv[1], "chan")  ? bench_chan
                       : !std::strcmp(argv[1], "then")  ? bench_then
                       : !std::strcmp(argv[1], "limit") ? bench_limit : nullptr;
    if (!fn)
        return 2;
    long n = argc > 2 ? std::atol(argv[2]) : 1000000;
    int reps = argc > 3 ? std::atoi(argv[3]) : 5;
    fn(n / 100 > 0 ? n / 100 : 1); // warm up
    for (int r = 0; r < reps; r++) {
        std::printf("%.2f\n", fn(n));
        std::fflush(stdout);
    }
    return 0;
}
