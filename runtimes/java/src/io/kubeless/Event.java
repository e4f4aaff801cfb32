package io.kubeless;

/**
 * One call of a Kubeless Java function:
 * {@code public String handler(io.kubeless.Event event, io.kubeless.Context context)}.
 * The field names are Kubeless's ({@code event.Data}, {@code event.EventID}, ...); getters are
 * there too.
 */
public class Event {
    /** The request body decoded as UTF-8; {@link #getBody()} has the exact bytes. */
    public final String Data;
    public final String EventID;
    public final String EventType;
    public final String EventTime;
    public final String EventNamespace;
    /** The HTTP request and a response the function may set a status, headers and bytes on. */
    public final Extensions extensions;

    public Event(String data, String eventId, String eventType, String eventTime, String eventNamespace,
            Extensions extensions) {
        this.Data = data;
        this.EventID = eventId;
        this.EventType = eventType;
        this.EventTime = eventTime;
        this.EventNamespace = eventNamespace;
        this.extensions = extensions;
    }

    public String getData() { return Data; }
    public String getEventID() { return EventID; }
    public String getEventType() { return EventType; }
    public String getEventTime() { return EventTime; }
    public String getEventNamespace() { return EventNamespace; }
    public Extensions getExtensions() { return extensions; }
    /** The request body, byte for byte. */
    public byte[] getBody() { return extensions.request.body; }
}
