package io.kubeless;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The HTTP answer. The function may set the status and headers and write bytes here; the string it
 * returns is written after those bytes. Without a Content-Type header the runtime sends
 * "text/plain; charset=utf-8" for UTF-8 text and "application/octet-stream" otherwise.
 */
public class Response {
    private int status = 200;
    private final List<String[]> headers = new ArrayList<>();
    private final ByteArrayOutputStream body = new ByteArrayOutputStream();

    public Response setStatus(int status) { this.status = status; return this; }
    public int getStatus() { return status; }

    /** Replaces every value of the header. */
    public Response setHeader(String name, String value) {
        headers.removeIf(h -> h[0].equalsIgnoreCase(name));
        headers.add(new String[] {name, value});
        return this;
    }

    public Response addHeader(String name, String value) {
        headers.add(new String[] {name, value});
        return this;
    }

    public String getHeader(String name) {
        for (String[] h : headers) {
            if (h[0].equalsIgnoreCase(name)) {
                return h[1];
            }
        }
        return null;
    }

    public List<String[]> getHeaders() { return headers; }

    public Response write(byte[] bytes) { body.write(bytes, 0, bytes.length); return this; }
    public Response write(String text) { return write(text.getBytes(StandardCharsets.UTF_8)); }

    /** Bytes written so far. */
    public ByteArrayOutputStream body() { return body; }
}
