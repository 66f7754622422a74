// The service `profcpu probe` is tested on (tests/probe.rs). A TCP line service on the loopback port given as its
// argument; it prints `ready` once it listens. Each request line is answered with one line:
//
//   r   a request: HandleRequest calls Books.Reconcile (JIT code, compiled at start-up by PrepareMethod so that
//       probing can begin before its first call), Convert.ToBase64String(byte[]) (ReadyToRun code in CoreLib) and
//       Ledger.Post (a virtual method) exactly once each
//   p   Ledger.Post alone (to bring it to its last tier before probing)
//   b   Convert.ToBase64String alone
//
// Methods that must be calls of their own are NoInlining: the JIT would fold them into their callers.

using System;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
using System.Threading;

public static class Books
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Reconcile(int n)
    {
        long s = 0;
        for (int i = 0; i < n; i++) s += i ^ (s >> 3);
        return s;
    }
}

public class Ledger
{
    [MethodImpl(MethodImplOptions.NoInlining)]
    public virtual long Post(int n)
    {
        long s = 1;
        for (int i = 0; i < n; i++) s += i * 3 ^ (s >> 2);
        return s;
    }
}

public static class Service
{
    static readonly Ledger ledger = new Ledger();

    [MethodImpl(MethodImplOptions.NoInlining)]
    static string HandleRequest(int n)
    {
        long total = Books.Reconcile(n) + ledger.Post(n);
        return total.ToString() + Convert.ToBase64String(new byte[] { (byte)n, 7 });
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    static string Answer(string request)
    {
        switch (request)
        {
            case "r": return HandleRequest(200);
            case "p": return ledger.Post(200).ToString();
            case "b": return Convert.ToBase64String(new byte[] { 1 });
            default: return "?";
        }
    }

    static void Serve(TcpClient client)
    {
        using (client)
        using (var stream = client.GetStream())
        using (var reader = new StreamReader(stream))
        using (var writer = new StreamWriter(stream))
        {
            string line;
            while ((line = reader.ReadLine()) != null)
            {
                writer.WriteLine(Answer(line));
                writer.Flush();
            }
        }
    }

    public static void Main(string[] args)
    {
        RuntimeHelpers.PrepareMethod(typeof(Books).GetMethod("Reconcile").MethodHandle);
        var listener = new TcpListener(IPAddress.Loopback, int.Parse(args[0]));
        listener.Start();
        Console.WriteLine("ready");
        while (true)
        {
            var client = listener.AcceptTcpClient();
            new Thread(() => Serve(client)).Start();
        }
    }
}
