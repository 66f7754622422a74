// Exercises framework code (LINQ, collections, strings, formatting, regex, sorting) so that many ReadyToRun methods
// of System.Private.CoreLib and other framework assemblies run. Builds with mono's mcs and runs on .NET Core 3.1
// and .NET 8 (only types both reach through mcs's reference assemblies).
//
// Usage: Workload MILLISECONDS. Prints "STARTED", works for that long, prints "READY <checksum>", then waits for
// standard input to close so the caller can inspect the live process.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Text;
using System.Text.RegularExpressions;

public static class Workload {
    static long Round(int i) {
        long acc = 0;
        var list = Enumerable.Range(0, 500).Select(x => x * 3).Where(x => x % 2 == 0).ToList();
        var dict = new Dictionary<string, int>();
        foreach (var x in list) dict[x.ToString()] = x;
        var sb = new StringBuilder();
        foreach (var kv in dict.OrderBy(k => k.Key).Take(40)) sb.Append(kv.Key).Append(',');
        var s = sb.ToString();
        acc += s.IndexOf("99") + s.Split(',').Length + s.ToUpperInvariant().GetHashCode() % 7;
        acc += s.Replace(",", ";").Contains("12;") ? 1 : 0;
        acc += string.Concat(s.Reverse().Take(10)).Length + s.Trim(',').Length + s.Substring(2, 5).Length;
        var re = new Regex("([0-9]+),([0-9]+)");
        foreach (Match m in re.Matches(s)) acc += m.Groups[1].Value.Length;
        var arr = list.ToArray();
        Array.Sort(arr);
        Array.Reverse(arr);
        acc += arr[0] + Array.BinarySearch(arr, 12);
        acc += string.Join("-", list.Take(10)).Length;
        acc += string.Format("{0} {1:F2} {2:X}", i, 3.5 * i, i).Length;
        acc += list.GroupBy(x => x % 10).Sum(g => g.Count());
        acc += list.Distinct().Count() + list.Max() + (long)list.Average();
        acc += DateTime.UtcNow.ToString("o").Length + Guid.NewGuid().ToString().Length;
        acc += int.Parse("1234") + (long)double.Parse("2.5") + Convert.ToBase64String(new byte[] { 1, 2, 3 }).Length;
        return acc;
    }

    public static int Main(string[] args) {
        int ms = args.Length > 0 ? int.Parse(args[0]) : 1000;
        Console.WriteLine("STARTED");
        var watch = Stopwatch.StartNew();
        long acc = 0;
        for (int i = 0; watch.ElapsedMilliseconds < ms; i++) acc += Round(i);
        Console.WriteLine("READY " + acc);
        Console.Out.Flush();
        Console.In.ReadToEnd();
        return 0;
    }
}
