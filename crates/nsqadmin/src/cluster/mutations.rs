//! The mutations of the cluster (nsq's internal/clusterinfo/data.go: `CreateTopicChannel`,
//! `DeleteTopic`, `DeleteChannel`, `TombstoneNodeForTopic`, the pause/empty actions): POSTs to
//! every nsqlookupd and producer, each step's failures one partial warning.

use super::*;

impl ClusterInfo {
    /// POSTs `path?qs` to every address, sequentially; failures become one warning.
    async fn post_all(&self, addrs: &[String], path: &str, qs: &str, warn: &mut Vec<String>) {
        let mut errs = Vec::new();
        for a in addrs {
            if let Err(e) = self
                .client
                .post_v1(&format!("http://{a}/{path}?{qs}"))
                .await
            {
                errs.push(e.to_string());
            }
        }
        if !errs.is_empty() {
            warn.push(errs.join("\n"));
        }
    }

    fn producer_addrs(ps: &[Producer]) -> Vec<String> {
        ps.iter().map(Producer::http_address).collect()
    }

    /// `CreateTopicChannel`. In N-mode (no lookupds) the topic and channel are created on every configured
    /// nsqd instead (the reference does nothing for a topic and fails for a channel there).
    pub async fn create_topic_channel(
        &self,
        topic: &str,
        channel: &str,
        warn: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        let tq = format!("topic={}", query_escape(topic));
        let cq = format!("{tq}&channel={}", query_escape(channel));
        if !self.lookupd_mode() {
            self.post_all(&self.nsqds, "topic/create", &tq, warn).await;
            if !channel.is_empty() {
                self.post_all(&self.nsqds, "channel/create", &cq, warn)
                    .await;
            }
            return Ok(());
        }
        self.post_all(&self.lookupds, "topic/create", &tq, warn)
            .await;
        if !channel.is_empty() {
            self.post_all(&self.lookupds, "channel/create", &cq, warn)
                .await;
            let ps = self.lookupd_topic_producers(topic, warn).await?;
            self.post_all(&Self::producer_addrs(&ps), "channel/create", &cq, warn)
                .await;
        }
        Ok(())
    }

    /// `DeleteTopic`.
    pub async fn delete_topic(
        &self,
        topic: &str,
        warn: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        self.delete(topic, None, warn).await
    }

    /// `DeleteChannel`.
    pub async fn delete_channel(
        &self,
        topic: &str,
        channel: &str,
        warn: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        self.delete(topic, Some(channel), warn).await
    }

    /// A topic or channel deletion: on every lookupd, then on every producer of the topic.
    async fn delete(
        &self,
        topic: &str,
        channel: Option<&str>,
        warn: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        let ps = self.topic_producers(topic, warn).await?;
        let uri = if channel.is_some() {
            "channel/delete"
        } else {
            "topic/delete"
        };
        let qs = topic_query(topic, channel);
        self.post_all(&self.lookupds, uri, &qs, warn).await;
        self.post_all(&Self::producer_addrs(&ps), uri, &qs, warn)
            .await;
        Ok(())
    }

    /// `actionHelper`: `uri` is e.g. `topic/pause` or `channel/empty`.
    pub async fn action(
        &self,
        topic: &str,
        channel: Option<&str>,
        uri: &str,
        warn: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        let ps = self.topic_producers(topic, warn).await?;
        let qs = topic_query(topic, channel);
        self.post_all(&Self::producer_addrs(&ps), uri, &qs, warn)
            .await;
        Ok(())
    }

    /// `TombstoneNodeForTopic`.
    pub async fn tombstone_topic_producer(
        &self,
        topic: &str,
        node: &str,
        warn: &mut Vec<String>,
    ) -> Result<(), ClusterError> {
        let qs = format!("topic={}&node={}", query_escape(topic), query_escape(node));
        self.post_all(&self.lookupds, "topic/tombstone", &qs, warn)
            .await;
        let p = Self::nsqd_producer(self.client.clone(), node.to_string()).await?;
        let qs = format!("topic={}", query_escape(topic));
        self.post_all(&[p.http_address()], "topic/delete", &qs, warn)
            .await;
        Ok(())
    }
}
