package io.kubeless;

/** The HTTP exchange behind an {@link Event}. */
public class Extensions {
    public final Request request;
    public final Response response;

    public Extensions(Request request, Response response) {
        this.request = request;
        this.response = response;
    }

    public Request getRequest() { return request; }
    public Response getResponse() { return response; }
}
