// Worker threads running framework code: ReadyToRun methods of System.Private.CoreLib, System.Linq,
// System.Text.RegularExpressions and System.Collections, and the runtime's native code (allocation, GC) under them.
// Builds with mono's mcs; runs on .NET Core 3.1 and .NET 8. Usage: App.dll SECONDS THREADS
// Prints "ready" when the workers start, "done" when they are finished.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;
using System.Text.RegularExpressions;
using System.Threading;

static class Workers
{
    static long sink;

    static long Work(int seed)
    {
        long acc = 0;
        var list = Enumerable.Range(seed, 400).Select(x => x * 7).Where(x => x % 3 != 0).ToList();
        var dict = new Dictionary<string, int>();
        foreach (var x in list) dict[x.ToString()] = x;
        var sb = new StringBuilder();
        foreach (var kv in dict.OrderBy(k => k.Key).Take(50)) sb.Append(kv.Key).Append(',');
        var s = sb.ToString();
        acc += s.IndexOf("77") + s.Split(',').Length + s.ToUpperInvariant().Length;
        acc += s.Replace(",", ";").Contains("14;") ? 1 : 0;
        var arr = list.ToArray();
        Array.Sort(arr);
        Array.Reverse(arr);
        acc += arr[0] + Array.BinarySearch(arr, 14);
        acc += string.Join("-", list.Take(20)).Length + string.Format("{0} {1:F2}", seed, 1.5 * seed).Length;
        foreach (Match m in Regex.Matches(s, "([0-9]+),([0-9]+)")) acc += m.Groups[1].Value.Length;
        acc += list.GroupBy(x => x % 10).Sum(g => g.Count()) + list.Distinct().Count();
        var sorted = new SortedDictionary<int, string>();
        foreach (var x in list.Take(100)) sorted[x % 97] = s;
        foreach (var key in sorted.Keys) acc += key;
        return acc;
    }

    static DateTime deadline;

    // The body of every worker thread (tests find worker samples by this frame).
    static void RunWorker(object id)
    {
        long acc = 0;
        for (int i = 0; DateTime.UtcNow < deadline; i++) acc += Work(i + (int)id);
        Interlocked.Add(ref sink, acc);
    }

    static void Main(string[] args)
    {
        double seconds = double.Parse(args[0], System.Globalization.CultureInfo.InvariantCulture);
        int threads = int.Parse(args[1]);
        deadline = DateTime.UtcNow.AddSeconds(seconds);
        var workers = new List<Thread>();
        for (int t = 0; t < threads; t++)
        {
            var thread = new Thread(RunWorker);
            thread.Name = "worker" + t;
            workers.Add(thread);
            thread.Start(t);
        }
        Console.WriteLine("ready");
        Console.Out.Flush();
        foreach (var w in workers) w.Join();
        Console.WriteLine("done " + sink);
    }
}
