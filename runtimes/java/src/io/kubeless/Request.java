package io.kubeless;

import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The incoming HTTP request. Header names are lower case. */
public class Request {
    public final String method;
    /** Path without the query string. */
    public final String path;
    /** Raw query string without '?', possibly empty. */
    public final String query;
    /** Path and query as received. */
    public final String url;
    public final String remoteAddr;
    public final Map<String, List<String>> headers;
    public final byte[] body;

    public Request(String method, String path, String query, String url, String remoteAddr,
            Map<String, List<String>> headers, byte[] body) {
        this.method = method;
        this.path = path;
        this.query = query;
        this.url = url;
        this.remoteAddr = remoteAddr;
        this.headers = Collections.unmodifiableMap(headers);
        this.body = body;
    }

    /** All values of a header joined with ", ", or null. */
    public String getHeader(String name) {
        List<String> v = headers.get(name.toLowerCase(java.util.Locale.ROOT));
        return v == null ? null : String.join(", ", v);
    }

    /** Query parameters: name to last value. */
    public Map<String, String> getQueryParameters() {
        Map<String, String> out = new LinkedHashMap<>();
        if (query.isEmpty()) {
            return out;
        }
        for (String pair : query.split("&")) {
            if (pair.isEmpty()) {
                continue;
            }
            int eq = pair.indexOf('=');
            String k = eq < 0 ? pair : pair.substring(0, eq);
            String v = eq < 0 ? "" : pair.substring(eq + 1);
            out.put(URLDecoder.decode(k, StandardCharsets.UTF_8), URLDecoder.decode(v, StandardCharsets.UTF_8));
        }
        return out;
    }

    public String getMethod() { return method; }
    public String getPath() { return path; }
    public String getQuery() { return query; }
    public String getUrl() { return url; }
    public byte[] getBody() { return body; }
}
