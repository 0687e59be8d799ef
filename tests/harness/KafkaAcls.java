// SPDX-License-Identifier: Apache-2.0
/*
 * Grant ACLs on a broker of the test harness that has an authorizer: allow
 * (or with --deny, deny) one principal some operations on some resources,
 * logged in as a super
 * user with the client settings of a properties file (bootstrap.servers,
 * security.protocol, sasl.*, ssl.*). Resources: a topic's literal name,
 * "transactional-id:NAME", "transactional-id-prefix:PREFIX" (a PREFIXED
 * pattern), "group:NAME", or "cluster" (Kafka topic names hold no colon and
 * "cluster" is not one the tests use); any host. Run by
 * SaslKafkaBroker.grant() (tests/harness/kafka.py) with java's source-file
 * mode and the broker's own jars on the class path:
 *
 *   java -cp '<kafka libs>/*' KafkaAcls.java [--deny] CLIENT_PROPERTIES PRINCIPAL \
 *        OPERATION[,OPERATION...] RESOURCE...
 *
 * e.g. ... admin.properties User:relay WRITE,DESCRIBE orders.created (a DENY
 * binding overrides every ALLOW: that is how a test takes an operation back)
 * Exits 0 once the controller accepted every binding; else prints why and
 * exits 1. Knows nothing of PostgreSQL or the relay.
 */
import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class KafkaAcls {
        private static ResourcePattern resource(String arg) {
                String[][] kinds = {{"transactional-id-prefix:", "TRANSACTIONAL_ID", "PREFIXED"},
                                    {"transactional-id:", "TRANSACTIONAL_ID", "LITERAL"},
                                    {"group:", "GROUP", "LITERAL"}};

                if (arg.equals("cluster"))
                        return new ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL);
                for (String[] k : kinds)
                        if (arg.startsWith(k[0]))
                                return new ResourcePattern(ResourceType.valueOf(k[1]),
                                                           arg.substring(k[0].length()),
                                                           PatternType.valueOf(k[2]));
                return new ResourcePattern(ResourceType.TOPIC, arg, PatternType.LITERAL);
        }

        public static void main(String[] argv) throws Exception {
                boolean deny = argv.length > 0 && argv[0].equals("--deny");
                String[] args = deny ? java.util.Arrays.copyOfRange(argv, 1, argv.length) : argv;

                if (args.length < 4) {
                        System.err.println("usage: KafkaAcls [--deny] CLIENT_PROPERTIES PRINCIPAL "
                                           + "OPERATION[,OPERATION...] RESOURCE...");
                        System.exit(2);
                }
                Properties p = new Properties();
                try (FileInputStream in = new FileInputStream(args[0])) {
                        p.load(in);
                }
                List<AclBinding> acls = new ArrayList<>();
                for (String op : args[2].split(",")) {
                        AclOperation operation = AclOperation.fromString(op);
                        if (operation == AclOperation.UNKNOWN) {
                                System.err.println("unknown ACL operation " + op);
                                System.exit(2);
                        }
                        for (int i = 3; i < args.length; i++)
                                acls.add(new AclBinding(resource(args[i]),
                                        new AccessControlEntry(args[1], "*", operation,
                                                               deny ? AclPermissionType.DENY
                                                                    : AclPermissionType.ALLOW)));
                }
                try (Admin admin = Admin.create(p)) {
                        admin.createAcls(acls).all().get(60, TimeUnit.SECONDS);
                } catch (Exception e) {
                        System.err.println("creating ACLs " + acls + " failed: " + e);
                        System.exit(1);
                }
        }
}
