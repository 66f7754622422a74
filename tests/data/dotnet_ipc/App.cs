// The test program of tests/dotnet_ipc.rs: each stdin line names a method to run, and `done <line>` answers once it
// returned, so the test knows exactly which methods have been JIT-compiled at each step.
using System;
using System.Runtime.CompilerServices;
public static class App {
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long BeforeEnable(int n) { long s = 0; for (int i = 0; i < n; i++) s += i ^ (s >> 3); return s; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long WhileEnabled(int n) { long s = 1; for (int i = 0; i < n; i++) s += i * 7 ^ (s >> 2); return s; }
    [MethodImpl(MethodImplOptions.NoInlining)]
    static long AfterDisable(int n) { long s = 2; for (int i = 0; i < n; i++) s += i * 5 ^ (s >> 1); return s; }
    // Calls WhileEnabled for `millis` ms: CPU time in a JIT-compiled method of this app.
    static long Spin(int millis) {
        long r = 0;
        var clock = System.Diagnostics.Stopwatch.StartNew();
        while (clock.ElapsedMilliseconds < millis) r += WhileEnabled(100000);
        return r;
    }
    // `spin MILLIS` on the command line: spin, then exit. Otherwise each stdin line names what to run.
    public static void Main(string[] args) {
        Console.WriteLine("ready " + System.Diagnostics.Process.GetCurrentProcess().Id);
        if (args.Length == 2 && args[0] == "spin") { Spin(int.Parse(args[1])); return; }
        string line;
        while ((line = Console.ReadLine()) != null) {
            long r = 0;
            switch (line.Trim()) {
                case "before": r = BeforeEnable(1000); break;
                case "while": r = WhileEnabled(1000); break;
                case "after": r = AfterDisable(1000); break;
                case "spin": r = Spin(3000); break;
            }
            Console.WriteLine("done " + line.Trim() + " " + r);
        }
    }
}
