#!/bin/sh
# Starts examples/NettyHello.java (a Netty 4.1 "Hello Netflix" HTTP server) in the foreground
# for examples/tomcat-vs-netty.toml: compiles it with javac against Debian's libnetty-java
# jars into the run directory (once per run), then runs it on 127.0.0.1 and the port
# stairbench chose; it is ready when it prints "NettyHello listening".
#   netty.sh OUT_DIR PORT [EVENT_LOOPS]
set -e
here=$(cd "$(dirname "$0")" && pwd)
jars=${NETTY_JARS:-/usr/share/java}
cp=""
for j in common buffer resolver transport transport-native-unix-common \
    transport-native-epoll codec codec-http handler; do
    f="$jars/netty-$j.jar"
    [ -f "$f" ] || { echo "netty.sh: $f not found (Debian: apt-get install libnetty-java)" >&2; exit 1; }
    cp="$cp:$f"
done
classes="$1/netty-classes"
if [ ! -f "$classes/NettyHello.class" ] || [ "$here/NettyHello.java" -nt "$classes/NettyHello.class" ]; then
    mkdir -p "$classes"
    javac -nowarn -d "$classes" -cp "${cp#:}" "$here/NettyHello.java"
fi
# Frame pointers in JIT-compiled code, so perf's stacks walk through Java frames.
exec java ${JAVA_OPTS:-} -XX:+PreserveFramePointer -cp "$classes$cp" NettyHello "$2" ${3:-}
