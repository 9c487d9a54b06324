// One Elasticsearch 7.10 node on 127.0.0.1 for baton's tests, started by
// scripts/servers.d/elastic.sh: Node DATA_DIR HTTP_PORT TRANSPORT_PORT.
import org.codelibs.elasticsearch.runner.ElasticsearchClusterRunner;

public class Node {
    public static void main(String[] args) throws Exception {
        String dir = args[0], http = args[1], transport = args[2];
        ElasticsearchClusterRunner runner = new ElasticsearchClusterRunner();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (Exception e) {
                System.err.println("closing: " + e);
            }
        }));
        // The runner's own settings put the transport port at 9300+: move
        // both ports here.
        runner.onBuild((number, settings) -> {
            settings.put("network.host", "127.0.0.1");
            settings.put("http.port", http);
            settings.put("transport.port", transport);
            settings.put("discovery.type", "single-node");
            settings.put("cluster.routing.allocation.disk.threshold_enabled", false);
            settings.put("action.auto_create_index", true);
        }).build(ElasticsearchClusterRunner.newConfigs().basePath(dir).numOfNode(1).clusterName("baton-test"));
        runner.ensureYellow();
        System.out.println("baton-test elasticsearch ready on 127.0.0.1:" + http);
        Thread.currentThread().join();
    }
}
