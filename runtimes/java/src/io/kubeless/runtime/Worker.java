package io.kubeless.runtime;

import io.kubeless.Context;
import io.kubeless.Event;
import io.kubeless.Extensions;
import io.kubeless.Request;
import io.kubeless.Response;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Java worker of the kubeless-rs runtime proxy. The proxy starts N of these; each loads
 * io.kubeless.MOD_NAME, finds the method FUNC_HANDLER(io.kubeless.Event, io.kubeless.Context),
 * connects to the unix socket in KUBELESS_WORKER_SOCKET and answers one framed call at a time:
 * u32 header length, JSON header, u32 body length, body. System.out/err go to the container log.
 */
public final class Worker {
    private static final int COALESCE = 64 * 1024;

    private final DataInputStream in;
    private final DataOutputStream out;

    private Worker(SocketChannel ch) {
        this.in = new DataInputStream(new BufferedInputStream(Channels.newInputStream(ch), COALESCE));
        this.out = new DataOutputStream(new BufferedOutputStream(Channels.newOutputStream(ch), COALESCE));
    }

    private void write(String head, byte[] body) throws IOException {
        byte[] h = head.getBytes(StandardCharsets.UTF_8);
        out.writeInt(h.length);
        out.write(h);
        out.writeInt(body.length);
        out.write(body);
        out.flush();
    }

    private static String env(String name) {
        String v = System.getenv(name);
        return v == null ? "" : v;
    }

    public static void main(String[] args) throws IOException {
        String socket = System.getenv("KUBELESS_WORKER_SOCKET");
        if (socket == null || socket.isEmpty()) {
            System.err.println("kubeless worker: KUBELESS_WORKER_SOCKET is not set");
            System.exit(2);
        }
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        ch.connect(UnixDomainSocketAddress.of(socket));
        Worker w = new Worker(ch);
        String className = "io.kubeless." + env("MOD_NAME");
        String methodName = env("FUNC_HANDLER");
        Object target;
        Method method;
        try {
            Class<?> cls = Class.forName(className);
            method = cls.getMethod(methodName, Event.class, Context.class);
            target = Modifier.isStatic(method.getModifiers()) ? null : cls.getDeclaredConstructor().newInstance();
        } catch (Throwable e) {
            Throwable cause = e instanceof InvocationTargetException ? e.getCause() : e;
            cause.printStackTrace();
            StringBuilder b = new StringBuilder("{\"ready\":false,\"error\":");
            Json.quote(b, "cannot load " + className + "." + methodName + ": " + cause);
            w.write(b.append('}').toString(), new byte[0]);
            System.exit(1);
            return;
        }
        w.write("{\"ready\":true,\"pid\":" + ProcessHandle.current().pid() + "}", new byte[0]);
        Context context = new Context(methodName, env("FUNC_TIMEOUT"), env("FUNC_RUNTIME"), env("FUNC_MEMORY_LIMIT"));
        for (;;) {
            int hlen;
            try {
                hlen = w.in.readInt();
            } catch (EOFException e) {
                System.exit(0);
                return;
            }
            byte[] head = new byte[hlen];
            w.in.readFully(head);
            byte[] body = new byte[w.in.readInt()];
            w.in.readFully(body);
            w.call(target, method, context, new String(head, StandardCharsets.UTF_8), body);
        }
    }

    @SuppressWarnings("unchecked")
    private void call(Object target, Method method, Context context, String headJson, byte[] body)
            throws IOException {
        Response response = new Response();
        Object result;
        try {
            Map<String, Object> head = (Map<String, Object>) Json.parse(headJson);
            Map<String, List<String>> headers = new LinkedHashMap<>();
            for (Object pair : (List<Object>) head.get("headers")) {
                List<Object> kv = (List<Object>) pair;
                headers.computeIfAbsent((String) kv.get(0), k -> new ArrayList<>()).add((String) kv.get(1));
            }
            Request request = new Request((String) head.get("method"), (String) head.get("path"),
                    (String) head.get("query"), (String) head.get("url"), (String) head.get("remote_addr"),
                    headers, body);
            Event event = new Event(new String(body, StandardCharsets.UTF_8), request.getHeader("event-id"),
                    request.getHeader("event-type"), request.getHeader("event-time"),
                    request.getHeader("event-namespace"), new Extensions(request, response));
            result = method.invoke(target, event, context);
        } catch (Throwable e) {
            Throwable cause = e instanceof InvocationTargetException ? e.getCause() : e;
            cause.printStackTrace();
            System.err.flush();
            StringBuilder b = new StringBuilder(
                    "{\"status\":500,\"headers\":[[\"content-type\",\"text/plain; charset=utf-8\"]],\"error\":");
            Json.quote(b, String.valueOf(cause));
            write(b.append('}').toString(), "Internal Server Error\n".getBytes(StandardCharsets.UTF_8));
            return;
        }
        if (result instanceof byte[]) {
            response.write((byte[]) result);
        } else if (result != null) {
            response.write(result.toString());
        }
        byte[] bytes = response.body().toByteArray();
        StringBuilder b = new StringBuilder("{\"status\":").append(response.getStatus()).append(",\"headers\":[");
        boolean first = true;
        for (String[] h : response.getHeaders()) {
            if (!first) b.append(',');
            first = false;
            b.append('[');
            Json.quote(b, h[0]);
            b.append(',');
            Json.quote(b, h[1]);
            b.append(']');
        }
        if (response.getHeader("content-type") == null && bytes.length > 0) {
            if (!first) b.append(',');
            b.append("[\"content-type\",\"").append(isUtf8(bytes) ? "text/plain; charset=utf-8" : "application/octet-stream")
                    .append("\"]");
        }
        write(b.append("]}").toString(), bytes);
    }

    private static boolean isUtf8(byte[] bytes) {
        try {
            StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(bytes));
            return true;
        } catch (CharacterCodingException e) {
            return false;
        }
    }
}
