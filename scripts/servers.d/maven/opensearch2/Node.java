// One OpenSearch node on 127.0.0.1 for baton's tests, started by
// scripts/servers.d/opensearch.sh: Node DATA_DIR HTTP_PORT TRANSPORT_PORT.
import org.codelibs.opensearch.runner.OpenSearchRunner;

public class Node {
    public static void main(String[] args) throws Exception {
        String dir = args[0], http = args[1], transport = args[2];
        OpenSearchRunner runner = new OpenSearchRunner();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (Exception e) {
                System.err.println("closing: " + e);
            }
        }));
        runner.onBuild((number, settings) -> {
            settings.put("network.host", "127.0.0.1");
            settings.put("http.port", http);
            settings.put("transport.port", transport);
            settings.put("discovery.type", "single-node");
            settings.put("cluster.routing.allocation.disk.threshold_enabled", false);
            settings.put("action.auto_create_index", true);
        }).build(OpenSearchRunner.newConfigs().basePath(dir).numOfNode(1).clusterName("baton-test"));
        runner.ensureYellow();
        System.out.println("baton-test opensearch ready on 127.0.0.1:" + http);
        Thread.currentThread().join();
    }
}
