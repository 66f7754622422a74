// Workloads for the symbolizer's tests, run on a real .NET runtime. Usage: App.dll MODE SECONDS
//   spin   two CPU-bound methods with identical bodies, called with a 3:1 work split (expect ~75% / ~25%)
//   alloc  allocation churn that keeps the garbage collector (native code in libcoreclr) busy
//   deep   one spinning thread per CPU, 12 calls deep (for examples/symbolize_bench.rs: many deep stacks)
// Prints "ready" when the measured phase starts (after the methods are JIT-compiled).
using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;

static class Workload
{
    static long sink;
    static object[] survivors = new object[200000];

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long SpinThreeQuarters(int n)
    {
        long acc = 1;
        for (int i = 0; i < n; i++) acc = (acc * 31 + i) ^ (acc >> 7);
        return acc;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long SpinOneQuarter(int n)
    {
        long acc = 1;
        for (int i = 0; i < n; i++) acc = (acc * 31 + i) ^ (acc >> 7);
        return acc;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Churn(int n)
    {
        uint x = 2463534242;
        for (int i = 0; i < n; i++)
        {
            x ^= x << 13; x ^= x >> 17; x ^= x << 5;
            // Replacing random survivors keeps old objects pointing at young ones: real marking work for the GC.
            survivors[x % (uint)survivors.Length] = new object[1 + (x & 7)];
            sink += new byte[16 + (x & 63)].Length;
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static long Recurse(int depth, int n)
    {
        return depth == 0 ? SpinThreeQuarters(n) : Recurse(depth - 1, n) + 1;
    }

    static void Main(string[] args)
    {
        string mode = args[0];
        double seconds = double.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture);
        Action step;
        if (mode == "spin")
            step = () => { sink += SpinThreeQuarters(3000000); sink += SpinOneQuarter(1000000); };
        else if (mode == "alloc")
            step = () => Churn(100000);
        else if (mode == "deep")
        {
            for (int t = 1; t < Environment.ProcessorCount; t++)
            {
                var worker = new System.Threading.Thread(() => { while (true) Recurse(12, 1000000); });
                worker.IsBackground = true;
                worker.Start();
            }
            step = () => { sink += Recurse(12, 1000000); };
        }
        else
            throw new ArgumentException("mode must be spin, alloc or deep");
        for (int i = 0; i < 3; i++) step();
        Console.WriteLine("ready");
        Console.Out.Flush();
        var sw = Stopwatch.StartNew();
        while (sw.Elapsed.TotalSeconds < seconds) step();
        Console.WriteLine(sink);
    }
}
