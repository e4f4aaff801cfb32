package io.kubeless;

/** What a Kubeless function knows about itself. */
public class Context {
    public final String functionName;
    public final String timeout;
    public final String runtime;
    public final String memoryLimit;

    public Context(String functionName, String timeout, String runtime, String memoryLimit) {
        this.functionName = functionName;
        this.timeout = timeout;
        this.runtime = runtime;
        this.memoryLimit = memoryLimit;
    }

    public String getFunctionName() { return functionName; }
    public String getTimeout() { return timeout; }
    public String getRuntime() { return runtime; }
    public String getMemoryLimit() { return memoryLimit; }
}
