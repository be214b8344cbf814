// Seed 003's other server: a small Netty 4.1 HTTP server answering "Hello Netflix" on every
// path, keep-alive, for examples/tomcat-vs-netty.toml (started and compiled by netty.sh
// against Debian's libnetty-java jars in /usr/share/java).
//   java -cp CLASSES:JARS NettyHello PORT [EVENT_LOOPS]
// Event loops use epoll where Netty's native transport loads, else NIO (Debian's package ships
// no native library, so NIO there); EVENT_LOOPS defaults to the CPUs the JVM may use. The
// threads are named netty-io-N (event loops) and netty-accept-N (the acceptor), so per-thread
// figures and flame graphs merge them into netty-io and netty-accept.
import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.ServerChannel;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollEventLoopGroup;
import io.netty.channel.epoll.EpollServerSocketChannel;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpObject;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpServerCodec;
import io.netty.handler.codec.http.HttpUtil;
import io.netty.handler.codec.http.HttpVersion;
import io.netty.util.concurrent.FastThreadLocalThread;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

public final class NettyHello {
    private static final byte[] BODY = "Hello Netflix\n".getBytes(StandardCharsets.US_ASCII);

    /** Threads named PREFIX-1, PREFIX-2, ... (Netty's FastThreadLocalThread, as its own). */
    private static ThreadFactory named(String prefix) {
        AtomicInteger next = new AtomicInteger();
        return r -> new FastThreadLocalThread(r, prefix + "-" + next.incrementAndGet());
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: NettyHello PORT [EVENT_LOOPS]");
            System.exit(2);
        }
        int port = Integer.parseInt(args[0]);
        int loops = args.length > 1 ? Integer.parseInt(args[1])
                : Runtime.getRuntime().availableProcessors();
        boolean epoll = Epoll.isAvailable();
        EventLoopGroup accept = epoll ? new EpollEventLoopGroup(1, named("netty-accept"))
                : new NioEventLoopGroup(1, named("netty-accept"));
        EventLoopGroup io = epoll ? new EpollEventLoopGroup(loops, named("netty-io"))
                : new NioEventLoopGroup(loops, named("netty-io"));
        Class<? extends ServerChannel> channel =
                epoll ? EpollServerSocketChannel.class : NioServerSocketChannel.class;
        try {
            ServerBootstrap b = new ServerBootstrap()
                    .group(accept, io)
                    .channel(channel)
                    .option(ChannelOption.SO_BACKLOG, 1024)
                    .childOption(ChannelOption.TCP_NODELAY, true)
                    .childHandler(new ChannelInitializer<SocketChannel>() {
                        @Override
                        protected void initChannel(SocketChannel ch) {
                            ch.pipeline().addLast(new HttpServerCodec(), new Hello());
                        }
                    });
            Channel server = b.bind("127.0.0.1", port).sync().channel();
            System.out.println("NettyHello listening on 127.0.0.1:" + port + " ("
                    + (epoll ? "epoll" : "nio") + ", " + loops + " event loops)");
            server.closeFuture().sync();
        } finally {
            accept.shutdownGracefully();
            io.shutdownGracefully();
        }
    }

    /** Answers each request with the body; keeps the connection unless the client closes it. */
    private static final class Hello extends SimpleChannelInboundHandler<HttpObject> {
        @Override
        protected void channelRead0(ChannelHandlerContext ctx, HttpObject msg) {
            if (!(msg instanceof HttpRequest)) {
                return;
            }
            HttpRequest req = (HttpRequest) msg;
            boolean keepAlive = HttpUtil.isKeepAlive(req);
            FullHttpResponse res = new DefaultFullHttpResponse(HttpVersion.HTTP_1_1,
                    HttpResponseStatus.OK, Unpooled.wrappedBuffer(BODY));
            res.headers()
                    .set(HttpHeaderNames.CONTENT_TYPE, HttpHeaderValues.TEXT_PLAIN)
                    .setInt(HttpHeaderNames.CONTENT_LENGTH, BODY.length);
            if (keepAlive) {
                if (!req.protocolVersion().isKeepAliveDefault()) {
                    res.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.KEEP_ALIVE);
                }
                ctx.write(res);
            } else {
                res.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE);
                ctx.write(res).addListener(ChannelFutureListener.CLOSE);
            }
        }

        /** One flush per batch of requests read, as Netty's own HTTP examples do. */
        @Override
        public void channelReadComplete(ChannelHandlerContext ctx) {
            ctx.flush();
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            ctx.close();
        }
    }
}
