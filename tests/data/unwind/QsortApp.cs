// A .NET thread that spends its time inside libc: SpinLoop P/Invokes libc's qsort with a managed comparator
// (libc calls back into managed code for every comparison). Frame pointers end in libc's merge sort; the stack
// copies, unwound with libc's CFI, reach SpinLoop and the thread's start method SpinMain. A second thread waits
// in Monitor.Wait (BlockOnMonitor) and Thread.Sleep (Nap); its switch-out stacks go through libc's futex wait and
// nanosleep, where frame pointers end too.
// Usage: dotnet App.dll SECONDS
using System;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Threading;

public static class App
{
    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
    delegate int Comparer(IntPtr a, IntPtr b);

    [DllImport("libc.so.6", CallingConvention = CallingConvention.Cdecl)]
    static extern void qsort(IntPtr items, UIntPtr count, UIntPtr size, Comparer compare);

    static readonly Comparer compare = ByValue;
    static readonly object gate = new object();
    static volatile bool stop;
    public static long Checksum;

    static int ByValue(IntPtr a, IntPtr b)
    {
        long x = Marshal.ReadInt64(a), y = Marshal.ReadInt64(b);
        return x < y ? -1 : (x > y ? 1 : 0);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinLoop(int count)
    {
        IntPtr items = Marshal.AllocHGlobal(count * 8);
        uint seed = 12345;
        while (!stop)
        {
            for (int i = 0; i < count; i++)
            {
                seed = seed * 1103515245u + 12345u;
                Marshal.WriteInt64(items, i * 8, seed >> 8);
            }
            qsort(items, (UIntPtr)count, (UIntPtr)8, compare);
            Checksum += Marshal.ReadInt64(items, (count / 2) * 8);
        }
        Marshal.FreeHGlobal(items);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void SpinMain()
    {
        SpinLoop(20000);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void BlockOnMonitor()
    {
        lock (gate)
        {
            Monitor.Wait(gate, 50);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void Nap()
    {
        Thread.Sleep(20);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static void WaitMain()
    {
        while (!stop)
        {
            BlockOnMonitor();
            Nap();
        }
    }

    public static void Main(string[] args)
    {
        int seconds = args.Length > 0 ? int.Parse(args[0]) : 5;
        var spinner = new Thread(SpinMain) { Name = "spinner" };
        var waiter = new Thread(WaitMain) { Name = "waiter" };
        spinner.Start();
        waiter.Start();
        Console.WriteLine("ready");
        Console.Out.Flush();
        Thread.Sleep(seconds * 1000);
        stop = true;
        spinner.Join();
        waiter.Join();
        Console.WriteLine(Checksum);
    }
}
