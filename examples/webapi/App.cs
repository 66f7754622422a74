// A deliberately small HTTP service used as a profiling target for profcpu.
//
// It runs on the plain .NET 8 runtime and on .NET Core 3.1 (no SDK, no
// ASP.NET): compiled by Debian's mono `mcs` against the desktop reference
// assemblies, whose type forwards the runtime resolves at load time.
// HttpListener is avoided because on 3.1 it needs OpenSSL 1.x, which the host
// does not have; a raw socket server has no such dependency.
//
// Each route exercises a different kind of profile:
//   GET /cpu     JIT-compiled user code with a known call chain
//                (PricingEngine.PriceBasket -> PriceItem -> ComputeDiscountCurve)
//   GET /sleep   off-CPU time (SleepHandler.Handle blocks 100 ms)
//   GET /wait    off-CPU time, the sync-over-async way (WaitHandler.Handle: Task.Delay(100).Wait())
//   GET /burn    on-CPU time by the clock (BurnHandler.Handle: PricingEngine work until the thread has used 100 ms
//                of CPU), the CPU-bound counterpart of /wait for on/off-CPU and wall-clock comparisons
//   GET /format  CPU time inside ReadyToRun framework code (CoreLib formatting)
//   GET /health  liveness probe, answers "ok"
//
// Methods that must show up as their own frames are marked NoInlining:
// otherwise the JIT folds them into their callers and the chain disappears.

using System;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

public static class App
{
    public static int Main(string[] args)
    {
        int port = 5080;
        string portEnv = Environment.GetEnvironmentVariable("PORT");
        if (!string.IsNullOrEmpty(portEnv))
            port = int.Parse(portEnv, CultureInfo.InvariantCulture);
        for (int i = 0; i < args.Length; i++)
        {
            if (args[i] == "--port" && i + 1 < args.Length)
                port = int.Parse(args[++i], CultureInfo.InvariantCulture);
        }

        // Loopback only by default: load tests must never leave the machine.
        string bind = Environment.GetEnvironmentVariable("BIND_ADDRESS");
        IPAddress address = string.IsNullOrEmpty(bind) ? IPAddress.Loopback : IPAddress.Parse(bind);

        var listener = new TcpListener(address, port);
        try
        {
            listener.Server.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.ReuseAddress, true);
            listener.Start(512);
        }
        catch (SocketException e)
        {
            // A plain message and exit code instead of an unhandled-exception
            // abort (SIGABRT), which would look like a runtime crash.
            Console.Error.WriteLine("webapi: cannot listen on {0}:{1}: {2}", address, port, e.Message);
            return 3;
        }
        Console.WriteLine("webapi: listening on {0}:{1} pid={2} runtime={3}",
            address, port, System.Diagnostics.Process.GetCurrentProcess().Id, Environment.Version);
        Console.Out.Flush();

        while (true)
        {
            Socket client;
            try
            {
                client = listener.AcceptSocket();
            }
            catch (SocketException e)
            {
                Console.Error.WriteLine("webapi: accept failed: {0}", e.Message);
                continue;
            }
            // One thread per connection keeps stacks simple to read in a
            // profile (no async state machines) and wrk uses few connections.
            var worker = new Thread(HttpConnection.Serve);
            worker.IsBackground = true;
            worker.Name = "http-conn";
            worker.Start(client);
        }
    }
}

static class HttpConnection
{
    const int MaxHeaderBytes = 16 * 1024;
    static readonly byte[] HeaderEnd = { 13, 10, 13, 10 };

    public static void Serve(object state)
    {
        var socket = (Socket)state;
        try
        {
            socket.NoDelay = true;
            // Idle keep-alive connections must not pin a thread forever.
            socket.ReceiveTimeout = 30000;
            ServeLoop(socket);
        }
        catch (SocketException) { }
        catch (ObjectDisposedException) { }
        catch (Exception e)
        {
            Console.Error.WriteLine("webapi: connection error: {0}", e);
        }
        finally
        {
            try { socket.Shutdown(SocketShutdown.Both); } catch (Exception) { }
            socket.Close();
        }
    }

    static void ServeLoop(Socket socket)
    {
        byte[] buf = new byte[MaxHeaderBytes];
        int filled = 0;
        while (true)
        {
            int headerLen;
            // Bytes after the header block may already hold the next pipelined
            // request, so search what we have before reading more.
            while ((headerLen = IndexOf(buf, filled, HeaderEnd)) < 0)
            {
                if (filled == buf.Length)
                {
                    Send(socket, 431, "Request Header Fields Too Large", "header too large\n", false);
                    return;
                }
                int n = socket.Receive(buf, filled, buf.Length - filled, SocketFlags.None);
                if (n == 0)
                    return;
                filled += n;
            }
            int consumed = headerLen + HeaderEnd.Length;
            string head = Encoding.ASCII.GetString(buf, 0, headerLen);
            string[] lines = head.Split(new[] { "\r\n" }, StringSplitOptions.None);
            string[] requestLine = lines[0].Split(' ');
            if (requestLine.Length != 3)
            {
                Send(socket, 400, "Bad Request", "bad request line\n", false);
                return;
            }
            string method = requestLine[0];
            string target = requestLine[1];
            string version = requestLine[2];

            // HTTP/1.1 defaults to persistent connections, 1.0 to closing.
            bool keepAlive = version == "HTTP/1.1";
            long contentLength = 0;
            for (int i = 1; i < lines.Length; i++)
            {
                int colon = lines[i].IndexOf(':');
                if (colon <= 0)
                    continue;
                string name = lines[i].Substring(0, colon).Trim();
                string value = lines[i].Substring(colon + 1).Trim();
                if (name.Equals("Content-Length", StringComparison.OrdinalIgnoreCase))
                {
                    if (!long.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out contentLength))
                    {
                        Send(socket, 400, "Bad Request", "bad content-length\n", false);
                        return;
                    }
                }
                else if (name.Equals("Connection", StringComparison.OrdinalIgnoreCase))
                {
                    if (value.IndexOf("close", StringComparison.OrdinalIgnoreCase) >= 0)
                        keepAlive = false;
                    else if (value.IndexOf("keep-alive", StringComparison.OrdinalIgnoreCase) >= 0)
                        keepAlive = true;
                }
                else if (name.Equals("Transfer-Encoding", StringComparison.OrdinalIgnoreCase))
                {
                    // Chunked bodies are not needed by any client we drive.
                    Send(socket, 501, "Not Implemented", "transfer-encoding not supported\n", false);
                    return;
                }
            }

            // Drop the request body: no route reads one, but it must not be
            // mistaken for the next request on a kept-alive connection.
            long bodyLeft = contentLength;
            int inBuf = filled - consumed;
            int fromBuf = (int)Math.Min(bodyLeft, inBuf);
            consumed += fromBuf;
            bodyLeft -= fromBuf;
            while (bodyLeft > 0)
            {
                int n = socket.Receive(buf, 0, (int)Math.Min(bodyLeft, buf.Length), SocketFlags.None);
                if (n == 0)
                    return;
                bodyLeft -= n;
            }
            int rest = filled - consumed;
            if (rest > 0)
                Buffer.BlockCopy(buf, consumed, buf, 0, rest);
            filled = Math.Max(rest, 0);

            int status;
            string reason;
            string body = Router.Dispatch(method, target, out status, out reason);
            if (method == "HEAD")
                body = null;
            Send(socket, status, reason, body, keepAlive);
            if (!keepAlive)
                return;
        }
    }

    static void Send(Socket socket, int status, string reason, string body, bool keepAlive)
    {
        byte[] payload = body == null ? new byte[0] : Encoding.UTF8.GetBytes(body);
        string header = "HTTP/1.1 " + status.ToString(CultureInfo.InvariantCulture) + " " + reason + "\r\n"
            + "Content-Type: text/plain; charset=utf-8\r\n"
            + "Content-Length: " + payload.Length.ToString(CultureInfo.InvariantCulture) + "\r\n"
            + (keepAlive ? "Connection: keep-alive\r\n" : "Connection: close\r\n")
            + "\r\n";
        byte[] head = Encoding.ASCII.GetBytes(header);
        byte[] all = new byte[head.Length + payload.Length];
        Buffer.BlockCopy(head, 0, all, 0, head.Length);
        Buffer.BlockCopy(payload, 0, all, head.Length, payload.Length);
        int sent = 0;
        while (sent < all.Length)
            sent += socket.Send(all, sent, all.Length - sent, SocketFlags.None);
    }

    static int IndexOf(byte[] haystack, int length, byte[] needle)
    {
        for (int i = 0; i + needle.Length <= length; i++)
        {
            int j = 0;
            while (j < needle.Length && haystack[i + j] == needle[j])
                j++;
            if (j == needle.Length)
                return i;
        }
        return -1;
    }
}

static class Router
{
    public static string Dispatch(string method, string target, out int status, out string reason)
    {
        status = 200;
        reason = "OK";
        if (method != "GET" && method != "HEAD")
        {
            status = 405;
            reason = "Method Not Allowed";
            return "only GET is supported\n";
        }
        string path = target;
        string query = "";
        int q = target.IndexOf('?');
        if (q >= 0)
        {
            path = target.Substring(0, q);
            query = target.Substring(q + 1);
        }
        switch (path)
        {
            case "/cpu":
                return CpuHandler.Handle(QueryInt(query, "items", 24));
            case "/sleep":
                return SleepHandler.Handle(QueryInt(query, "ms", 100));
            case "/wait":
                return WaitHandler.Handle(QueryInt(query, "ms", 100));
            case "/burn":
                return BurnHandler.Handle(QueryInt(query, "ms", 100));
            case "/format":
                return FormatHandler.Handle(QueryInt(query, "rows", 4000));
            case "/health":
                return "ok";
            default:
                status = 404;
                reason = "Not Found";
                return "no such route: " + path + "\n";
        }
    }

    // Lets a caller scale the work per request (e.g. /cpu?items=100) without
    // a rebuild; bad or absent values fall back to the default.
    static int QueryInt(string query, string key, int fallback)
    {
        foreach (string pair in query.Split('&'))
        {
            int eq = pair.IndexOf('=');
            if (eq > 0 && pair.Substring(0, eq) == key)
            {
                int v;
                if (int.TryParse(pair.Substring(eq + 1), NumberStyles.Integer, CultureInfo.InvariantCulture, out v) && v >= 0)
                    return Math.Min(v, 100000);
            }
        }
        return fallback;
    }
}

static class CpuHandler
{
    static int requestCounter;

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string Handle(int items)
    {
        int basketId = Interlocked.Increment(ref requestCounter);
        double total = PricingEngine.PriceBasket(basketId, items);
        return "basket " + basketId.ToString(CultureInfo.InvariantCulture)
            + " total " + total.ToString("F4", CultureInfo.InvariantCulture) + "\n";
    }
}

// The CPU-heavy chain a profile of /cpu should show by name. The work is plain
// arithmetic so that the samples land in JIT-compiled code of this assembly
// rather than in the runtime or in precompiled framework code.
public static class PricingEngine
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static double PriceBasket(int basketId, int items)
    {
        double total = 0;
        for (int i = 0; i < items; i++)
        {
            ulong sku = (ulong)basketId * 1000003UL + (ulong)i;
            total += PriceItem(sku);
        }
        return total;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static double PriceItem(ulong sku)
    {
        // FNV-1a over a synthetic SKU record: gives PriceItem self time of
        // its own, next to the time spent in its callee.
        ulong h = 14695981039346656037UL;
        for (int round = 0; round < 20000; round++)
        {
            ulong v = sku + (ulong)round;
            for (int b = 0; b < 8; b++)
            {
                h ^= (v >> (b * 8)) & 0xFF;
                h *= 1099511628211UL;
            }
        }
        double basePrice = 1.0 + (h % 10000) / 100.0;
        double[] curve = ComputeDiscountCurve(h);
        return basePrice * curve[(int)(h % (ulong)curve.Length)];
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    public static double[] ComputeDiscountCurve(ulong seed)
    {
        // A fixed-point iteration per tenor; no Math.* calls, which would
        // move samples into libm/libcoreclr instead of this frame.
        const int Tenors = 64;
        double[] curve = new double[Tenors];
        double rate = 0.01 + (seed % 1000) / 100000.0;
        for (int t = 0; t < Tenors; t++)
        {
            double df = 1.0;
            double x = rate * (t + 1);
            for (int k = 0; k < 1200; k++)
            {
                df = df - (df * (1.0 + x) - 1.0) * 0.5;
                x = x * 0.999999 + 1e-9 * k;
            }
            curve[t] = df;
        }
        return curve;
    }
}

static class SleepHandler
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string Handle(int ms)
    {
        Thread.Sleep(ms);
        return "slept " + ms.ToString(CultureInfo.InvariantCulture) + " ms\n";
    }
}

static class WaitHandler
{
    // Blocks the request's thread on a task that a timer completes: the thread waits in the runtime (Monitor /
    // ManualResetEventSlim), not in a sleep.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string Handle(int ms)
    {
        Task.Delay(ms).Wait();
        return "waited " + ms.ToString(CultureInfo.InvariantCulture) + " ms\n";
    }
}

static class BurnHandler
{
    [StructLayout(LayoutKind.Sequential)]
    struct Timespec
    {
        public long Seconds;
        public long Nanoseconds;
    }

    [DllImport("libc", EntryPoint = "clock_gettime")]
    static extern int ClockGettime(int clock, out Timespec time);

    const int ClockThreadCpuTime = 3; // CLOCK_THREAD_CPUTIME_ID

    static double ThreadCpuMs()
    {
        Timespec t;
        ClockGettime(ClockThreadCpuTime, out t);
        return t.Seconds * 1e3 + t.Nanoseconds / 1e6;
    }

    // Works until this thread has been on a CPU for `ms` milliseconds, however long that takes on a busy machine.
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string Handle(int ms)
    {
        double start = ThreadCpuMs();
        double total = 0;
        ulong sku = 0;
        while (ThreadCpuMs() - start < ms)
            total += PricingEngine.PriceItem(sku++);
        return "burned " + ms.ToString(CultureInfo.InvariantCulture) + " ms of CPU in " + sku.ToString(CultureInfo.InvariantCulture)
            + " items, total " + total.ToString("F2", CultureInfo.InvariantCulture) + "\n";
    }
}

// Spends its time in framework code (number formatting and parsing in
// System.Private.CoreLib), which is precompiled (ReadyToRun) in this runtime
// and therefore not described by the perf map.
static class FormatHandler
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static string Handle(int rows)
    {
        var sb = new StringBuilder();
        long checksum = 0;
        CultureInfo inv = CultureInfo.InvariantCulture;
        for (int i = 0; i < rows; i++)
        {
            sb.Clear();
            sb.Append(string.Format(inv, "{0:D8}|{1:N2}|{2:X}|{3:yyyy-MM-dd}", i, i * 1.25, i * 31, new DateTime(2020, 1, 1).AddDays(i % 365)));
            string row = sb.ToString();
            string[] parts = row.Split('|');
            checksum += int.Parse(parts[0], inv);
            checksum += (long)double.Parse(parts[1], NumberStyles.Number, inv);
            checksum += int.Parse(parts[2], NumberStyles.HexNumber, inv);
            checksum += DateTime.ParseExact(parts[3], "yyyy-MM-dd", inv).DayOfYear;
        }
        return "rows " + rows.ToString(inv) + " checksum " + checksum.ToString(inv) + "\n";
    }
}
