#!/bin/sh
# Starts Apache Tomcat (Debian's tomcat10) in the foreground for examples/tomcat.toml: its own
# CATALINA_BASE in the run directory, one HTTP/1.1 connector on 127.0.0.1 and the port
# stairbench chose, a thread pool named tomcat-exec (the merged name in per-thread figures and
# flame graphs) and a one-line JSP as the whole site: seed 003's "Hello Netflix" page.
#   tomcat.sh OUT_DIR PORT [MAX_THREADS] [PAGE]
# PAGE `locked` serves instead a JSP that holds one lock (the application object's monitor)
# for LOCK_MS (2) ms a request, sleeping: past one client the pool's threads wait for it
# (limits-jvm-lock.toml). /jvm-threads answers the JVM's own view of the pool: "THREADS
# BLOCKED", its tomcat-exec threads and how many of them are BLOCKED on a monitor.
set -e
home=${CATALINA_HOME:-/usr/share/tomcat10}
base="$1/tomcat-$2"
rm -rf "$base"
mkdir -p "$base/conf" "$base/logs" "$base/temp" "$base/work" "$base/webapps/ROOT"
# web.xml (the JSP servlet), logging.properties, catalina.properties, context.xml as shipped.
cp "$home"/etc/web.xml "$home"/etc/logging.properties "$home"/etc/catalina.properties \
    "$home"/etc/context.xml "$base/conf/"
cat > "$base/conf/server.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<Server port="-1" shutdown="SHUTDOWN">
  <Service name="Catalina">
    <Executor name="pool" namePrefix="tomcat-exec-" maxThreads="${3:-200}" minSpareThreads="4"/>
    <Connector executor="pool" address="127.0.0.1" port="$2" protocol="HTTP/1.1"
               connectionTimeout="20000" maxKeepAliveRequests="-1" maxConnections="10000"/>
    <Engine name="Catalina" defaultHost="localhost">
      <Host name="localhost" appBase="webapps" unpackWARs="false" autoDeploy="false"/>
    </Engine>
  </Service>
</Server>
XML
if [ "${4:-hello}" = locked ]; then
    cat > "$base/webapps/ROOT/hello.jsp" <<JSP
<%@ page contentType="text/plain" session="false" %><%
synchronized (application) {
    try { Thread.sleep(${LOCK_MS:-2}); } catch (InterruptedException e) { }
}
%>locked
JSP
else
    printf '%s\n' '<%@ page contentType="text/plain" session="false" %>Hello Netflix' \
        > "$base/webapps/ROOT/hello.jsp"
fi
cat > "$base/webapps/ROOT/jvm-threads.jsp" <<'JSP'
<%@ page contentType="text/plain" session="false" %><%
int pool = 0, blocked = 0;
for (Thread t : Thread.getAllStackTraces().keySet()) {
    if (t.getName().startsWith("tomcat-exec-")) {
        pool++;
        if (t.getState() == Thread.State.BLOCKED) blocked++;
    }
}
%><%= pool %> <%= blocked %>
JSP
# The JSP answers every path and is compiled while Tomcat starts (load-on-startup), so the
# first measured request does not wait for Jasper.
mkdir -p "$base/webapps/ROOT/WEB-INF"
cat > "$base/webapps/ROOT/WEB-INF/web.xml" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<web-app xmlns="https://jakarta.ee/xml/ns/jakartaee" version="6.0">
  <servlet>
    <servlet-name>hello</servlet-name>
    <jsp-file>/hello.jsp</jsp-file>
    <load-on-startup>1</load-on-startup>
  </servlet>
  <servlet-mapping>
    <servlet-name>hello</servlet-name>
    <url-pattern>/</url-pattern>
  </servlet-mapping>
  <servlet>
    <servlet-name>jvm-threads</servlet-name>
    <jsp-file>/jvm-threads.jsp</jsp-file>
    <load-on-startup>2</load-on-startup>
  </servlet>
  <servlet-mapping>
    <servlet-name>jvm-threads</servlet-name>
    <url-pattern>/jvm-threads</url-pattern>
  </servlet-mapping>
</web-app>
XML
export CATALINA_HOME="$home" CATALINA_BASE="$base" CATALINA_TMPDIR="$base/temp"
# Frame pointers in JIT-compiled code, so perf's stacks walk through Java frames.
export JAVA_OPTS="${JAVA_OPTS:-} -XX:+PreserveFramePointer"
exec "$home/bin/catalina.sh" run
